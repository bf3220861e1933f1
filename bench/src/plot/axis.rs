//! The three axes a picture has: message size (log 2), time per call (log 10) and bus
//! bandwidth (linear from 0), each with round ticks and labels in units people read.

/// One tick: where it sits (in the axis's units) and what it says.
#[derive(Clone, Debug, PartialEq)]
pub struct Tick {
    pub value: f64,
    pub label: String,
}

/// An axis: its range, scale and ticks.
#[derive(Clone, Debug, PartialEq)]
pub struct Axis {
    pub min: f64,
    pub max: f64,
    pub log: bool,
    pub ticks: Vec<Tick>,
}

impl Axis {
    /// Where `value` sits between the axis's ends: 0 at `min`, 1 at `max`.
    pub fn fraction(&self, value: f64) -> f64 {
        if self.log {
            (value.ln() - self.min.ln()) / (self.max.ln() - self.min.ln())
        } else {
            (value - self.min) / (self.max - self.min)
        }
    }
}

/// Most ticks a size axis gets (their labels must not collide).
const SIZE_TICKS: u32 = 9;

/// Message sizes from `min` to `max` bytes (both at least 1) on a log scale, the ends a
/// little beyond the extreme sizes; ticks at powers of 2 from the smallest size's power
/// up, every `step` octaves, the smallest step that keeps them at most [`SIZE_TICKS`] (so
/// that a table's sizes, nccl-tests' `-f 2` or `-f 4` steps, fall on ticks).
pub fn size_axis(min: u64, max: u64) -> Axis {
    let mut low = (min.max(1) as f64).log2().floor() as u32;
    let mut high = ((max.max(1) as f64).log2().ceil() as u32).min(63);
    if high == low {
        low = low.saturating_sub(1);
        high += 1;
    }
    let step = (1..).find(|s| (high - low) / s < SIZE_TICKS).unwrap_or(high - low);
    let ticks = (low..=high).step_by(step as usize).map(|e| Tick { value: (1u64 << e) as f64, label: bytes_label(1u64 << e) }).collect();
    // A margin of 3% of the range on both sides, so the end points' markers are whole.
    let margin = 0.03 * f64::from(high - low);
    Axis { min: 2f64.powf(f64::from(low) - margin), max: 2f64.powf(f64::from(high) + margin), log: true, ticks }
}

/// Times from `min` to `max` microseconds (positive) on a log scale from the decade below
/// to the decade above; ticks at every decade, and at 2 and 5 within when the axis spans
/// two decades or fewer.
pub fn time_axis(min: f64, max: f64) -> Axis {
    let low = min.log10().floor() as i32;
    let mut high = max.log10().ceil() as i32;
    if high <= low {
        high = low + 1;
    }
    let mut values = Vec::new();
    for e in low..=high {
        let decade = 10f64.powi(e);
        values.push(decade);
        if high - low <= 2 && e < high {
            values.extend([2.0 * decade, 5.0 * decade]);
        }
    }
    let ticks = values.into_iter().map(|value| Tick { value, label: time_label(value) }).collect();
    Axis { min: 10f64.powi(low), max: 10f64.powi(high), log: true, ticks }
}

/// 0 to a round number at or above `max` (GB/s), with about five ticks of 1, 2, 2.5 or 5
/// times a power of ten.
pub fn linear_axis(max: f64) -> Axis {
    let max = if max > 0.0 && max.is_finite() { max } else { 1.0 };
    let rough = max / 5.0;
    let magnitude = 10f64.powf(rough.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0].into_iter().map(|m| m * magnitude).find(|s| *s >= rough).unwrap_or(10.0 * magnitude);
    let count = (max / step - 1e-9).ceil().max(1.0) as u32;
    let ticks = (0..=count).map(|i| f64::from(i) * step).map(|value| Tick { value, label: compact(value) }).collect();
    Axis { min: 0.0, max: f64::from(count) * step, log: false, ticks }
}

/// Bytes in binary units: "8 B", "1 KiB", "1.5 MiB", "128 MiB".
pub fn bytes_label(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut unit = 0;
    while unit + 1 < UNITS.len() && bytes >= 1u64 << (10 * (unit + 1)) {
        unit += 1;
    }
    let value = bytes as f64 / (1u64 << (10 * unit)) as f64;
    let text = if value.fract() == 0.0 { format!("{value:.0}") } else { format!("{value:.1}") };
    format!("{text} {}", UNITS[unit])
}

/// Microseconds in the unit that reads best: "50 µs", "2 ms", "1.5 s".
pub fn time_label(us: f64) -> String {
    if us >= 1e6 {
        format!("{} s", compact(us / 1e6))
    } else if us >= 1e3 {
        format!("{} ms", compact(us / 1e3))
    } else {
        format!("{} µs", compact(us))
    }
}

/// A number without trailing zeros: 2, 2.5, 0.01 (at most six decimals).
pub fn compact(value: f64) -> String {
    let text = format!("{value:.6}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(axis: &Axis) -> Vec<&str> {
        axis.ticks.iter().map(|t| t.label.as_str()).collect()
    }

    #[test]
    fn size_ticks_are_powers_of_two_that_fit() {
        // nccl-tests -b 8 -e 128M -f 4: 2^3 .. 2^27, every third power.
        let axis = size_axis(8, 128 << 20);
        assert_eq!(labels(&axis), ["8 B", "64 B", "512 B", "4 KiB", "32 KiB", "256 KiB", "2 MiB", "16 MiB", "128 MiB"]);
        assert!(axis.min < 8.0 && axis.max > (128 << 20) as f64 && axis.log);
        assert!((axis.fraction(8.0) - 0.03 / 1.06).abs() < 1e-9);
        assert_eq!(labels(&size_axis(1024, 1024 * 64)), ["1 KiB", "2 KiB", "4 KiB", "8 KiB", "16 KiB", "32 KiB", "64 KiB"]);
        // One size: an octave each side. Odd sizes: the powers of two around them.
        assert_eq!(labels(&size_axis(4096, 4096)), ["2 KiB", "4 KiB", "8 KiB"]);
        assert_eq!(labels(&size_axis(1000, 3000)), ["512 B", "1 KiB", "2 KiB", "4 KiB"]);
        assert_eq!(labels(&size_axis(8, 1 << 20))[..3], ["8 B", "32 B", "128 B"]);
        assert!(size_axis(1, u64::MAX).ticks.len() <= SIZE_TICKS as usize);
    }

    #[test]
    fn time_ticks_are_decades_with_2_and_5_when_few() {
        let axis = time_axis(24.6, 20958.1);
        assert_eq!(labels(&axis), ["10 µs", "100 µs", "1 ms", "10 ms", "100 ms"]);
        assert_eq!((axis.min, axis.max), (10.0, 100000.0));
        assert!((axis.fraction(1000.0) - 0.5).abs() < 1e-12);
        assert_eq!(labels(&time_axis(25.0, 60.0)), ["10 µs", "20 µs", "50 µs", "100 µs"]);
        assert_eq!(labels(&time_axis(100.0, 100.0)), ["100 µs", "200 µs", "500 µs", "1 ms"]);
        assert_eq!(labels(&time_axis(0.5, 2e6))[..2], ["0.1 µs", "1 µs"]);
        assert_eq!(time_axis(0.5, 2e6).ticks.last().unwrap().label, "10 s");
    }

    #[test]
    fn busbw_ticks_are_round_from_zero() {
        let axis = linear_axis(6.45);
        assert_eq!(labels(&axis), ["0", "2", "4", "6", "8"]);
        assert_eq!((axis.min, axis.max, axis.log), (0.0, 8.0, false));
        assert_eq!(labels(&linear_axis(12.94)), ["0", "5", "10", "15"]);
        assert_eq!(labels(&linear_axis(2.3)), ["0", "0.5", "1", "1.5", "2", "2.5"]);
        assert_eq!(labels(&linear_axis(0.3)), ["0", "0.1", "0.2", "0.3"]);
        assert_eq!(labels(&linear_axis(0.0)), ["0", "0.2", "0.4", "0.6", "0.8", "1"]);
        assert_eq!(linear_axis(5.0).max, 5.0);
    }

    #[test]
    fn units_read_as_people_write_them() {
        assert_eq!([bytes_label(8), bytes_label(1024), bytes_label(1536), bytes_label(128 << 20), bytes_label(1 << 30)], ["8 B", "1 KiB", "1.5 KiB", "128 MiB", "1 GiB"]);
        assert_eq!([time_label(26.24), time_label(1323.4), time_label(2.5e6)], ["26.24 µs", "1.3234 ms", "2.5 s"]);
        assert_eq!([compact(0.30000000000000004), compact(12.5), compact(3.0)], ["0.3", "12.5", "3"]);
    }
}
