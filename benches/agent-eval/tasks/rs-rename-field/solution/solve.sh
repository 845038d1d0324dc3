sed -i 's/\bqty\b/quantity/g' src/line.rs src/total.rs
