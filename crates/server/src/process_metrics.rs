//! The process series every Prometheus client exports (`process_*`, as
//! client_golang names them): CPU, memory, file descriptors, threads and
//! start time, read from `/proc/self` at each scrape. Linux only (where
//! tollgate is deployed); elsewhere they are simply absent. No crate of the
//! prometheus-client ecosystem is kept up for this, and the reads are a
//! few lines of text.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

/// `/proc`'s clock tick: USER_HZ, 100 on every Linux ABI.
const TICKS_A_SECOND: f64 = 100.0;

/// Encodes the process series at each scrape.
#[derive(Debug, Default)]
pub struct ProcessCollector;

/// What `/proc/self` says of this process now.
#[derive(Debug, Default, PartialEq)]
pub struct ProcessReading {
    /// User and system CPU time, in seconds.
    pub cpu_seconds: f64,
    /// Resident memory, in bytes.
    pub resident_bytes: u64,
    /// Virtual memory, in bytes.
    pub virtual_bytes: u64,
    /// Open file descriptors.
    pub open_fds: u64,
    /// The soft limit on open file descriptors.
    pub max_fds: Option<u64>,
    /// OS threads.
    pub threads: u64,
    /// When the process started, in seconds since the Unix epoch.
    pub start_time_seconds: Option<f64>,
}

impl ProcessReading {
    /// Reads `/proc/self`; `None` where there is none (not Linux).
    pub fn now() -> Option<Self> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let mut reading = parse_stat(&stat)?;
        reading.resident_bytes = status_kb(&status, "VmRSS:").unwrap_or(0) * 1024;
        reading.virtual_bytes = status_kb(&status, "VmSize:").unwrap_or(0) * 1024;
        reading.open_fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64);
        reading.max_fds = std::fs::read_to_string("/proc/self/limits")
            .ok()
            .and_then(|limits| max_open_files(&limits));
        let boot = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|s| boot_time(&s));
        reading.start_time_seconds = boot
            .zip(reading.start_time_seconds)
            .map(|(boot, since_boot)| boot as f64 + since_boot);
        Some(reading)
    }
}

/// `/proc/self/stat`'s CPU times, threads and start (seconds since boot,
/// until [`ProcessReading::now`] adds the boot time). The command name may
/// hold spaces and parentheses: fields count from the last `)`.
fn parse_stat(stat: &str) -> Option<ProcessReading> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    // Field 3 (state) is the first after the name.
    let fields: Vec<&str> = after_name.split_ascii_whitespace().collect();
    let field = |n: usize| -> Option<u64> { fields.get(n - 3)?.parse().ok() };
    let ticks = field(14)?.saturating_add(field(15)?);
    Some(ProcessReading {
        cpu_seconds: ticks as f64 / TICKS_A_SECOND,
        threads: field(20)?,
        start_time_seconds: Some(field(22)? as f64 / TICKS_A_SECOND),
        ..ProcessReading::default()
    })
}

/// A `kB` line of `/proc/self/status`.
fn status_kb(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))?
        .split_ascii_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The soft limit of `Max open files` in `/proc/self/limits`.
fn max_open_files(limits: &str) -> Option<u64> {
    limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))?
        .split_ascii_whitespace()
        .next()?
        .parse()
        .ok()
}

/// `btime` of `/proc/stat`: the boot, in seconds since the Unix epoch.
fn boot_time(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(r) = ProcessReading::now() else {
            return Ok(());
        };
        encoder
            .encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                MetricType::Counter,
            )?
            .encode_counter::<NoLabelSet, _, u64>(&r.cpu_seconds, None)?;
        let count = |n: u64| Some(i64::try_from(n).unwrap_or(i64::MAX));
        let whole = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                count(r.resident_bytes),
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                count(r.virtual_bytes),
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                count(r.open_fds),
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors",
                r.max_fds.and_then(count),
            ),
            (
                "process_threads",
                "Number of OS threads in the process",
                count(r.threads),
            ),
        ];
        for (name, help, value) in whole {
            if let Some(value) = value {
                encoder
                    .encode_descriptor(name, help, None, MetricType::Gauge)?
                    .encode_gauge(&value)?;
            }
        }
        if let Some(start) = r.start_time_seconds {
            encoder
                .encode_descriptor(
                    "process_start_time_seconds",
                    "Start time of the process since the Unix epoch in seconds",
                    None,
                    MetricType::Gauge,
                )?
                .encode_gauge(&start)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_count_from_the_last_parenthesis_of_the_name() {
        let stat = "4242 (tollgate (x) y) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 7 0 12345 1000000 500 18446744073709551615";
        let r = parse_stat(stat).expect("parses");
        assert_eq!(
            (r.cpu_seconds, r.threads, r.start_time_seconds),
            (3.0, 7, Some(123.45))
        );
    }

    #[test]
    fn status_limits_and_boot_time_are_read_by_their_keys() {
        let status = "Name:\ttollgate\nVmSize:\t  123456 kB\nVmRSS:\t   12000 kB\n";
        assert_eq!(status_kb(status, "VmRSS:"), Some(12_000));
        assert_eq!(status_kb(status, "VmSize:"), Some(123_456));
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \nMax open files            1024                 524288               files     \n";
        assert_eq!(max_open_files(limits), Some(1024));
        assert_eq!(
            boot_time("cpu  1 2 3\nbtime 1700000000\n"),
            Some(1_700_000_000)
        );
    }
}
