//! Every committed fuzz corpus (`fuzz/corpus/<target>/*`, grown by `cargo fuzz run` and
//! committed) replayed through its target's property on the stable toolchain: an input that once
//! found a bug stays a regression test. Each target must have a non-empty corpus.

use std::path::Path;

#[test]
fn every_corpus_entry_still_holds_its_property() {
    let corpora = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    for (name, target) in gateway_fuzz::TARGETS {
        let dir = corpora.join(name);
        let entries: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("the corpus of {name} is missing at {}: {e}", dir.display()))
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.is_file())
            .collect();
        assert!(!entries.is_empty(), "the corpus of {name} is empty");
        for path in &entries {
            let data = std::fs::read(path).unwrap();
            let outcome = std::panic::catch_unwind(|| target(&data));
            assert!(outcome.is_ok(), "{name}: {} breaks its property", path.display());
        }
        eprintln!("{name}: {} corpus entries replayed", entries.len());
    }
}
