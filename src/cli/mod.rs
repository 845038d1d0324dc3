//! The command-line layer: clap definitions, settings resolution and rendering. This is the only
//! module that prints; everything it calls returns values.

pub mod dwp;
pub mod kxen;
pub mod output;
