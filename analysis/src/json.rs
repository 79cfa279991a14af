//! How figures are written in JSON documents: counts (tokens, FLOPs, bytes) as integers, since
//! a count is never fractional; a rate or a duration stays a float.

use serde::Serializer;

/// A count computed in floating point (a per-GPU share, a sum of products), written as the
/// nearest integer.
pub fn count<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.is_finite() && v.abs() < 9.0e18 {
        s.serialize_i64(v.round() as i64)
    } else {
        s.serialize_f64(*v)
    }
}

/// A figure that is whole when its source states a whole number (80 GiB, 8 GPUs, 3.35 TB/s in
/// bytes per second) written as an integer; any other as a float.
pub fn whole<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 9.0e18 {
        s.serialize_i64(*v as i64)
    } else {
        s.serialize_f64(*v)
    }
}

#[cfg(test)]
mod tests {
    #[derive(serde::Serialize)]
    struct T {
        #[serde(serialize_with = "super::count")]
        c: f64,
        #[serde(serialize_with = "super::whole")]
        w: f64,
        #[serde(serialize_with = "super::whole")]
        r: f64,
    }

    #[test]
    fn counts_are_integers_and_fractions_stay() {
        let t = T {
            c: 201.0000001,
            w: 85_899_345_920.0,
            r: 0.9,
        };
        assert_eq!(
            serde_json::to_string(&t).unwrap(),
            r#"{"c":201,"w":85899345920,"r":0.9}"#
        );
    }
}
