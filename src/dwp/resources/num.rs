//! Numbers as the reference prints them: ints stay ints, floats print with Python `repr`
//! (`5.0`, `1e-07`), and arithmetic follows Python's int/float promotion.

use serde_json::{Number, Value};

/// A JSON number with Python's int/float distinction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Num {
    Int(i64),
    Float(f64),
}

impl Num {
    /// The stored number (a `u64` beyond `i64` becomes a float, as it would lose nothing that
    /// matters for a budget).
    pub fn from_number(n: &Number) -> Num {
        match n.as_i64() {
            Some(i) if !n.is_f64() => Num::Int(i),
            _ => Num::Float(n.as_f64().unwrap_or(0.0)),
        }
    }

    pub fn from_value(v: &Value) -> Option<Num> {
        match v {
            Value::Number(n) => Some(Num::from_number(n)),
            _ => None,
        }
    }

    pub fn as_f64(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }

    /// Python truthiness (`0` and `0.0` are falsy).
    pub fn is_zero(self) -> bool {
        self.as_f64() == 0.0
    }

    /// `self - other` with Python promotion (int − int stays int unless it overflows).
    pub fn minus(self, other: Num) -> Num {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => match a.checked_sub(b) {
                Some(d) => Num::Int(d),
                None => Num::Float(a as f64 - b as f64),
            },
            (a, b) => Num::Float(a.as_f64() - b.as_f64()),
        }
    }

    pub fn to_value(self) -> Value {
        match self {
            Num::Int(i) => Value::from(i),
            Num::Float(f) => Number::from_f64(f).map_or(Value::Null, Value::Number),
        }
    }

    /// Python `str()`.
    pub fn py_str(self) -> String {
        match self {
            Num::Int(i) => i.to_string(),
            Num::Float(f) => crate::canonical::python_float_repr(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_promotion_and_printing() {
        assert_eq!(Num::Int(4000).minus(Num::Float(3995.0)).py_str(), "5.0");
        assert_eq!(Num::Int(60).minus(Num::Int(5)).py_str(), "55");
        assert_eq!(Num::Float(0.2).minus(Num::Float(0.0)).py_str(), "0.2");
        assert_eq!(
            Num::Float(2.5e-05).minus(Num::Float(1e-07)).py_str(),
            "2.4900000000000002e-05"
        );
        assert_eq!(Num::Float(1e-07).py_str(), "1e-07");
        assert_eq!(
            Num::Int(i64::MIN).minus(Num::Int(1)).py_str(),
            "-9.223372036854776e+18"
        );
    }
}
