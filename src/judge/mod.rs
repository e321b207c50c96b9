//! Everything that decides what an archived report proves (layer L4): the one reader of report
//! directories, the one verdict every command calls, the checks the host judges for itself,
//! signatures, the human review and the host's ledger of signed reviews, and the bounded PNG
//! decode they need. Nothing here prints or renders; `render/` presents what this decides.

pub mod artifacts;
pub mod compare;
pub mod consistency;
pub mod ledger;
pub mod pixels;
pub mod reader;
pub mod recheck;
pub mod review;
pub mod sign;
pub mod verdict;

pub use reader::ReportDir;
pub use verdict::{judge, How, Outcome, Refused};
