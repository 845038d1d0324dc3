pub mod line;
pub mod total;

pub use line::Line;
pub use total::total_cents;
