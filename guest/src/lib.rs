pub mod clock;
pub mod digest;
pub mod report;
