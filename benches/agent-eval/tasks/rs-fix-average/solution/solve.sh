sed -i 's|Some((sum / values.len() as i64) as f64)|Some(sum as f64 / values.len() as f64)|' src/lib.rs
