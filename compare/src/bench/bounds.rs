//! The bounds of each load on a sleeping route, and medians.
//!
//! A route that sleeps S seconds, loaded by C clients, has a true ceiling of C / S
//! requests per second: every client always waiting on one request. No run of a
//! real tool reaches it, because of how the tool starts and stops; the expected figure
//! says how far it can get, however good the server is:
//! - ab (2.3, Debian 12) sends one request alone first, then the other n-1 at
//!   concurrency c, so it cannot finish before S x (1 + ceil((n-1)/c)) seconds:
//!   3.0 s for `-c 5 -n 10`, 11.0 s (181.8 req/s) for `-c 220 -n 2000` at S = 1.
//! - wrk -c C -d D stops while its last wave is still in flight, so at most about
//!   (C / S) x (D - S) / D requests per second complete: C x (D-1)/D for S = 1.
//!
//! The table reports each measured rate against both: `of ceiling C/S` and `of
//! expected` (the second near 100% means the server added nothing to the wait).

use crate::bench::scenario::Load;

/// The shortest time ab can take for `n` requests at concurrency `c` on an S-second route.
pub fn ab_floor_secs(requests: usize, concurrency: usize, route_secs: f64) -> f64 {
    let waves = 1 + (requests.saturating_sub(1)).div_ceil(concurrency.max(1));
    route_secs * waves as f64
}

/// The true ceiling of `load` on an S-second route: C / S.
pub fn ceiling_rps(load: &Load, route_secs: f64) -> f64 {
    load.concurrency() as f64 / route_secs
}

/// The highest request rate `load` can be expected to see on an S-second route: the
/// ab floor, or wrk's C x (D-S) / (D x S).
pub fn expected_rps(load: &Load, route_secs: f64) -> f64 {
    match *load {
        Load::Ab {
            concurrency,
            requests,
        } => requests as f64 / ab_floor_secs(requests, concurrency, route_secs),
        Load::Wrk {
            concurrency,
            duration_secs,
        } => {
            let d = duration_secs as f64;
            (concurrency as f64 / route_secs) * ((d - route_secs).max(0.0) / d)
        }
        // One request per connection, then nothing: no rate to expect.
        Load::Idle { .. } => f64::NAN,
    }
}

/// The median of `values` (the mean of the middle two for an even count); `None` if empty.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ab_floors_match_the_measured_ones() {
        assert_eq!(ab_floor_secs(10, 5, 1.0), 3.0);
        assert_eq!(ab_floor_secs(2000, 220, 1.0), 11.0);
        let rps = expected_rps(
            &Load::Ab {
                concurrency: 220,
                requests: 2000,
            },
            1.0,
        );
        assert!((rps - 181.818).abs() < 0.01, "{rps}");
        assert_eq!(ab_floor_secs(10, 5, 0.1), 0.30000000000000004);
    }

    #[test]
    fn wrk_ceiling_is_c_times_d_minus_one_over_d() {
        let load = Load::Wrk {
            concurrency: 5000,
            duration_secs: 10,
        };
        assert_eq!(expected_rps(&load, 1.0), 4500.0);
        assert_eq!(ceiling_rps(&load, 1.0), 5000.0);
        let load = Load::Wrk {
            concurrency: 20,
            duration_secs: 2,
        };
        assert!((expected_rps(&load, 0.2) - 90.0).abs() < 1e-9);
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[f64::NAN, 1.0]), Some(1.0));
    }
}
