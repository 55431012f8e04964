//! The files a SQLite store leaves on disk: the database and its `-wal` and `-shm` are readable
//! and writable by their owner only (INTERFACE.md §10: mode 0600), whatever the process's umask
//! would have given them, while files the operator made keep their mode.

use gateway_store::StoreSpec;

use crate::support::Fixture;

#[cfg(unix)]
fn mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).permissions().mode() & 0o777
}

#[cfg(unix)]
#[tokio::test]
async fn a_new_database_and_its_wal_are_mode_0600() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("private.db");
    let spec = StoreSpec::SqliteFile(path.display().to_string());
    let fixture = Fixture::at(spec, None).await;
    // A write, so that the WAL and its index exist and hold something.
    fixture.coop("files", 2).await;
    for suffix in ["", "-wal", "-shm"] {
        let file = dir.path().join(format!("private.db{suffix}"));
        assert_eq!(mode(&file), 0o600, "{} is mode {:o}", file.display(), mode(&file));
    }
    // A file the operator made beforehand (here 0640, say for a backup group) keeps its mode.
    drop(fixture);
    let shared = dir.path().join("shared.db");
    std::fs::File::create(&shared).unwrap();
    std::fs::set_permissions(&shared, std::os::unix::fs::PermissionsExt::from_mode(0o640)).unwrap();
    let fixture = Fixture::at(StoreSpec::SqliteFile(shared.display().to_string()), None).await;
    fixture.coop("files", 1).await;
    assert_eq!(mode(&shared), 0o640);
}
