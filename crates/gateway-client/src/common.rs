//! Shapes shared by the list routes: the page request and the `pagination` object.
//!
//! Each list route has its own envelope type (`{"<items>": [...], "pagination"}`) in its area
//! module, because the item field name differs per resource.

use serde::{Deserialize, Serialize};

/// Which slice of a list to fetch. `None` leaves the gateway's default (limit 50, offset 0);
/// limits above 100 are clamped by the gateway.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageRequest {
    /// Page size.
    pub limit: Option<u32>,
    /// Items to skip.
    pub offset: Option<u64>,
}

impl PageRequest {
    /// The first `limit` items.
    pub fn first(limit: u32) -> Self {
        Self { limit: Some(limit), offset: None }
    }
}

/// Where a page sits in the whole list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pagination {
    /// The page size used.
    pub limit: u64,
    /// Items skipped.
    pub offset: u64,
    /// Items in the whole list.
    pub total: u64,
    /// Whether items follow this page.
    pub has_more: bool,
}
