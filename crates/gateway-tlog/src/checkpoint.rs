//! C2SP tlog-checkpoint: the note text a log signs for a tree head.
//!
//! ```text
//! <origin>
//! <tree size, decimal, no leading zeros>
//! <root hash, base64>
//! [extension lines, non-empty, opaque]
//! ```
//!
//! Each line ends in a newline. The checkpoint is signed as a note ([`crate::note`]) by the log,
//! whose key name should be the origin, and cosigned by witnesses ([`crate::cosignature`]).

use std::fmt;

use crate::hash::{Hash, hash_from_base64, hash_to_base64};

/// A malformed checkpoint body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointError {
    /// The checkpoint text does not follow tlog-checkpoint.
    #[error("malformed checkpoint: {0}")]
    Malformed(&'static str),
}

/// A checkpoint body: origin, tree size, root hash and optional extension lines.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Checkpoint {
    origin: String,
    size: u64,
    root: Hash,
    extensions: Vec<String>,
}

/// Checks one line of a checkpoint: non-empty, no control characters (a newline included).
fn check_line(line: &str, what: &'static str) -> Result<(), CheckpointError> {
    if line.is_empty() {
        return Err(CheckpointError::Malformed(what));
    }
    if line.chars().any(|c| c < ' ') {
        return Err(CheckpointError::Malformed("control character in a line"));
    }
    Ok(())
}

impl Checkpoint {
    /// A checkpoint without extension lines. The origin must be a non-empty line without
    /// control characters.
    pub fn new(origin: impl Into<String>, size: u64, root: Hash) -> Result<Self, CheckpointError> {
        let origin = origin.into();
        check_line(&origin, "empty origin")?;
        Ok(Self { origin, size, root, extensions: Vec::new() })
    }

    /// The checkpoint with these extension lines (each non-empty, without control characters).
    /// Their use is not recommended: monitors cannot audit them.
    pub fn with_extensions(mut self, extensions: Vec<String>) -> Result<Self, CheckpointError> {
        for line in &extensions {
            check_line(line, "empty extension line")?;
        }
        self.extensions = extensions;
        Ok(self)
    }

    /// Parses a checkpoint body (a note text): at least three lines, each ending in a newline;
    /// a non-empty origin; the size in decimal without leading zeros or sign; the root in
    /// standard base64 of exactly 32 bytes; then non-empty extension lines.
    pub fn parse(text: &str) -> Result<Self, CheckpointError> {
        let body = text.strip_suffix('\n').ok_or(CheckpointError::Malformed("does not end with a newline"))?;
        let mut lines = body.split('\n');
        let origin = lines.next().unwrap_or_default();
        check_line(origin, "empty origin")?;
        let size = lines.next().ok_or(CheckpointError::Malformed("no tree size"))?;
        let size = parse_size(size).ok_or(CheckpointError::Malformed("the tree size is not a canonical decimal"))?;
        let root = lines.next().ok_or(CheckpointError::Malformed("no root hash"))?;
        let root =
            hash_from_base64(root).ok_or(CheckpointError::Malformed("the root hash is not base64 of 32 bytes"))?;
        let mut extensions = Vec::new();
        for line in lines {
            check_line(line, "empty extension line")?;
            extensions.push(line.to_owned());
        }
        Ok(Self { origin: origin.to_owned(), size, root, extensions })
    }

    /// The origin: the log's identity.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The tree size.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The root hash of the tree at that size.
    pub fn root(&self) -> &Hash {
        &self.root
    }

    /// The extension lines, without their newlines.
    pub fn extensions(&self) -> &[String] {
        &self.extensions
    }

    /// The checkpoint body, the text a log signs.
    pub fn to_text(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for Checkpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}\n{}\n{}\n", self.origin, self.size, hash_to_base64(&self.root))?;
        for line in &self.extensions {
            writeln!(f, "{line}")?;
        }
        Ok(())
    }
}

/// A tree size: ASCII digits, no sign, no leading zeros unless it is `0`, at most `u64::MAX`.
pub(crate) fn parse_size(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) || (text.len() > 1 && text.starts_with('0')) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::{empty_root, leaf_hash};

    // The example of C2SP tlog-checkpoint.
    const EXAMPLE: &str = "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n";

    #[test]
    fn parses_the_spec_example() {
        let checkpoint = Checkpoint::parse(EXAMPLE).unwrap();
        assert_eq!(checkpoint.origin(), "example.com/behind-the-sofa");
        assert_eq!(checkpoint.size(), 20852163);
        assert_eq!(hash_to_base64(checkpoint.root()), "CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=");
        assert!(checkpoint.extensions().is_empty());
        assert_eq!(checkpoint.to_text(), EXAMPLE);
    }

    #[test]
    fn round_trips_with_extensions() {
        let checkpoint = Checkpoint::new("log.example/a", 0, empty_root())
            .unwrap()
            .with_extensions(vec!["ext one".into(), "— two".into()])
            .unwrap();
        let text = checkpoint.to_text();
        assert_eq!(text, format!("log.example/a\n0\n{}\next one\n— two\n", hash_to_base64(&empty_root())));
        assert_eq!(Checkpoint::parse(&text).unwrap(), checkpoint);
        let max = Checkpoint::new("o", u64::MAX, leaf_hash(b"")).unwrap();
        assert_eq!(Checkpoint::parse(&max.to_text()).unwrap(), max);
    }

    #[test]
    fn rejects_malformed_checkpoints() {
        let root = "CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=";
        for bad in [
            String::new(),
            "\n".into(),
            "example.com/log\n".into(),
            "example.com/log\n5\n".into(),
            format!("example.com/log\n5\n{root}"),
            format!("\n5\n{root}\n"),
            format!("example.com/log\n\n{root}\n"),
            format!("example.com/log\n05\n{root}\n"),
            format!("example.com/log\n+5\n{root}\n"),
            format!("example.com/log\n-5\n{root}\n"),
            format!("example.com/log\n 5\n{root}\n"),
            format!("example.com/log\n5 \n{root}\n"),
            format!("example.com/log\n0x5\n{root}\n"),
            format!("example.com/log\n18446744073709551616\n{root}\n"),
            format!("example.com/log\n5\n{}\n", &root[..43]),
            format!("example.com/log\n5\n{}J=\n", &root[..42]),
            format!("example.com/log\n5\n{root}=\n"),
            "example.com/log\n5\nAAAA\n".into(),
            format!("example.com/log\n5\n{}\n", hash_to_base64(&[0; 32]).replace('=', "")),
            format!("example.com/log\n5\n{root}\n\n"),
            format!("example.com/log\n5\n{root}\next\n\n"),
            format!("example.com/log\n5\n{root}\n\next\n"),
            format!("example.com/log\r\n5\n{root}\n"),
            format!("example.com/log\n5\r\n{root}\n"),
            format!("example.com/\tlog\n5\n{root}\n"),
            format!("example.com/log\n5\n{root}\next\x7f\x01\n"),
        ] {
            assert!(Checkpoint::parse(&bad).is_err(), "{bad:?} parsed");
        }
        assert!(Checkpoint::new("", 1, empty_root()).is_err());
        assert!(Checkpoint::new("a\nb", 1, empty_root()).is_err());
        assert!(Checkpoint::new("a", 1, empty_root()).unwrap().with_extensions(vec![String::new()]).is_err());
        assert!(Checkpoint::new("a", 1, empty_root()).unwrap().with_extensions(vec!["x\ny".into()]).is_err());
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn round_trips(origin in "[^\\x00-\\x1f]{1,30}", size in any::<u64>(), root in any::<[u8; 32]>(),
                           extensions in proptest::collection::vec("[^\\x00-\\x1f]{1,10}", 0..3)) {
                let checkpoint = Checkpoint::new(origin, size, root).unwrap().with_extensions(extensions).unwrap();
                prop_assert_eq!(Checkpoint::parse(&checkpoint.to_text()).unwrap(), checkpoint);
            }

            #[test]
            fn parse_never_panics(text in "[a-z0-9+/=\n]{0,80}") {
                let _ = Checkpoint::parse(&text);
            }
        }
    }
}
