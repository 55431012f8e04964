//! `export`: the treasurer's export (INTERFACE.md §13), streamed from the gateway into a file in
//! constant memory. The file appears only once the export is complete: it is written as
//! `<file>.partial` beside it, flushed to disk, then renamed, so that a failure half-way never
//! leaves a complete-looking file behind.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use super::{Context, LoggedIn};
use crate::cli::ExportArgs;

/// `<file>.partial`, beside `<file>`.
fn partial_path(output: &Path) -> PathBuf {
    let mut name = output.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".partial");
    output.with_file_name(name)
}

pub(crate) async fn run(context: &Context, session: &LoggedIn, args: ExportArgs) -> anyhow::Result<()> {
    let coop = session.coop()?;
    if args.output.file_name().is_none() {
        anyhow::bail!("--output must name a file, not {}", args.output.display());
    }
    let partial = partial_path(&args.output);
    let mut file =
        tokio::fs::File::create(&partial).await.with_context(|| format!("creating {}", partial.display()))?;
    let written = session
        .client
        .export_to(coop, &args.format, args.from.as_deref(), args.to.as_deref(), args.member.as_deref(), &mut file)
        .await;
    let finished = match written {
        Ok(bytes) => file.sync_all().await.map(|()| bytes).with_context(|| format!("writing {}", partial.display())),
        Err(error) => Err(anyhow::Error::new(error).context("exporting")),
    };
    drop(file);
    let bytes = match finished {
        Ok(bytes) => bytes,
        Err(error) => {
            let _ = tokio::fs::remove_file(&partial).await;
            return Err(error);
        }
    };
    tokio::fs::rename(&partial, &args.output)
        .await
        .with_context(|| format!("renaming {} to {}", partial.display(), args.output.display()))?;
    let shown = serde_json::json!({ "file": args.output.display().to_string(), "bytes": bytes, "format": args.format });
    context.out.show(&shown, || format!("wrote {} ({bytes} bytes, {})", args.output.display(), args.format))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_partial_file_is_beside_the_output() {
        assert_eq!(partial_path(Path::new("/tmp/books.beancount")), Path::new("/tmp/books.beancount.partial"));
        assert_eq!(partial_path(Path::new("books.csv")), Path::new("books.csv.partial"));
    }
}
