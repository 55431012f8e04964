//! Pagination of list endpoints: `limit` (default 50, clamped to 100) and `offset` (default 0).

/// Default page size.
pub const DEFAULT_LIMIT: u32 = 50;
/// Largest page size; larger requests are clamped to it.
pub const MAX_LIMIT: u32 = 100;

/// A validated page request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRequest {
    /// Items per page, `1..=MAX_LIMIT`.
    pub limit: u32,
    /// Items to skip.
    pub offset: u64,
}

impl Default for PageRequest {
    fn default() -> Self {
        Self { limit: DEFAULT_LIMIT, offset: 0 }
    }
}

impl PageRequest {
    /// Applies the defaults and the clamp. A limit of 0 is refused: it asks for nothing.
    pub fn new(limit: Option<u64>, offset: Option<u64>) -> Result<Self, &'static str> {
        let limit = match limit {
            None => DEFAULT_LIMIT,
            Some(0) => return Err("limit must be at least 1"),
            Some(n) => n.min(u64::from(MAX_LIMIT)) as u32,
        };
        Ok(Self { limit, offset: offset.unwrap_or(0) })
    }

    /// The page description for a result of `total` items.
    pub fn info(self, total: u64) -> PageInfo {
        PageInfo {
            limit: self.limit,
            offset: self.offset,
            total,
            has_more: self.offset.saturating_add(u64::from(self.limit)) < total,
        }
    }
}

/// The `pagination` object of a list response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PageInfo {
    /// Page size used.
    pub limit: u32,
    /// Items skipped.
    pub offset: u64,
    /// Items in the whole result.
    pub total: u64,
    /// Whether items remain after this page.
    pub has_more: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_clamp() {
        assert_eq!(PageRequest::new(None, None).unwrap(), PageRequest { limit: 50, offset: 0 });
        assert_eq!(PageRequest::new(Some(1000), Some(5)).unwrap().limit, 100);
        assert!(PageRequest::new(Some(0), None).is_err());
        let info = PageRequest::new(Some(10), Some(10)).unwrap().info(21);
        assert!(info.has_more);
        assert!(!PageRequest::new(Some(10), Some(20)).unwrap().info(21).has_more);
    }
}
