pub mod conv;
pub mod dot;
