//! Instructions per API call (`--only instructions`): the daemon run under valgrind's
//! callgrind, its counters zeroed after a warm-up and dumped after a fixed number of calls
//! through its API over TCP. Instruction counts repeat to a tenth of a percent from run to
//! run, on a machine whose timings move by a third, so a change to the call path shows here
//! when the timed scenarios cannot see it. They count user-space work only: no system call,
//! no wait, no cache miss.
//!
//! Two functions run differently under valgrind and are counted apart: `memset` for a large
//! block is one `rep stosb`, which valgrind counts once per byte (actix-http clears an array
//! of 96 header slots, 3 KiB, each time it tries to parse a request, 5 to 6 times for each:
//! 18,000 of the count, some 800 cycles on the machine), and valgrind hides SHA-NI, so
//! `sha2` hashes the API token (and, over HTTP, each response's id for the seen-set) in
//! software.
//!
//! Owns: the `api_instructions` records. Must not touch: the other scenarios.

use super::*;
use std::collections::HashMap;

/// Calls counted at each level, after a warm-up of a tenth of as many.
const COUNTED: [(&str, &str, usize, u64); 3] = [
    ("stdio", "mcp__bench__echo", 1, 1_000),
    ("stdio", "mcp__bench__echo", 16, 4_000),
    ("http", "mcp__benchhttp__echo", 16, 4_000),
];

/// The functions valgrind runs differently (see the module's comment).
fn emulated(name: &str) -> bool {
    name.starts_with("__memset") || name.starts_with("sha2::")
}

impl Bench {
    pub(crate) fn instructions(&mut self) {
        println!("\n== instructions per API call (callgrind) ==");
        let found = ["valgrind", "callgrind_control"].iter().all(|p| {
            Command::new(p)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok()
        });
        if !found {
            self.note("valgrind not found: instructions per call not measured".into());
            return;
        }
        let ext = json!({"enabled": {"mcp": true}, "mcp": {"servers": {
            "bench": {"type": "stdio", "command": self.exe, "args": ["__stdio-server"]},
            "benchhttp": {"type": "http", "url": format!("http://127.0.0.1:{}/mcp", self.http_port())},
        }}});
        let out = self.scratch.0.join("callgrind.out");
        let wrapper: Vec<String> = [
            "valgrind",
            "--tool=callgrind",
            "--dump-instr=no",
            "--compress-strings=no",
            "--compress-pos=no",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([format!("--callgrind-out-file={}", out.display())])
        .collect();
        let Some(d) =
            self.start_daemon_under("callgrind", &ext, &wrapper, Duration::from_secs(180))
        else {
            return;
        };
        let Some(id) = self.open_session(&d) else {
            return;
        };
        for (k, (transport, tool, c, calls)) in COUNTED.into_iter().enumerate() {
            let path = [format!("/sessions/{id}/tools/{tool}/call")];
            let run = |n: u64| {
                self.rt.block_on(async {
                    let mut conns: Vec<_> = (0..c).map(|_| d.conn()).collect();
                    let far = Instant::now() + Duration::from_secs(3600);
                    daemon::load(&mut conns, &path, ECHO_BODY, far, Some(n)).await
                })
            };
            run(calls / 10);
            let zeroed = control(&["-z", &d.pid().to_string()]);
            let (lat, _, errors) = run(calls);
            let dumped = control(&["-d", &d.pid().to_string()]);
            let dump = PathBuf::from(format!("{}.{}", out.display(), k + 1));
            let counts = match (zeroed && dumped, std::fs::read_to_string(&dump)) {
                (true, Ok(text)) => Counts::read(&text),
                (_, r) => {
                    let why = r.err().map(|e| e.to_string()).unwrap_or_default();
                    self.fail(format!(
                        "callgrind gave no dump at {}: {why}",
                        dump.display()
                    ));
                    return;
                }
            };
            if let Some(dir) = std::env::var_os("BENCH_CALLGRIND_DIR") {
                // Kept for `callgrind_annotate` or a reader of its own: the dump's folder is
                // the run's scratch, removed at the end.
                let to = PathBuf::from(dir).join(format!("callgrind.{transport}-c{c}.out"));
                if let Err(e) = std::fs::copy(&dump, &to) {
                    self.note(format!("callgrind dump not kept at {}: {e}", to.display()));
                }
            }
            let n = lat.len().max(1) as f64;
            let total: u64 = counts.own.values().sum();
            let apart: u64 = counts
                .own
                .iter()
                .filter(|(f, _)| emulated(f))
                .map(|(_, v)| v)
                .sum();
            let mut top: Vec<(&String, &u64)> = counts.own.iter().collect();
            top.sort_by(|a, b| b.1.cmp(a.1));
            let top: Vec<Value> = top
                .into_iter()
                .take(12)
                .map(|(f, v)| {
                    json!([
                        f.chars().take(120).collect::<String>(),
                        (*v as f64 / n).round()
                    ])
                })
                .collect();
            let rec = json!({
                "scenario": "api_instructions",
                "client": API,
                "transport": transport,
                "concurrency": c,
                "calls": lat.len(),
                "errors": errors,
                "instructions_per_call": (total as f64 / n).round(),
                "instructions_per_call_without_emulated": ((total - apart) as f64 / n).round(),
                "emulated": "memset (rep stosb counted per byte) and sha2 (software, as valgrind hides SHA-NI)",
                "mallocs_per_call": (counts.mallocs as f64 / n * 10.0).round() / 10.0,
                "top_own_instructions_per_call": top,
            });
            println!(
                "api_instructions {transport:5} c={c:<3} {:>8} instructions/call ({:>8} without memset and sha2), {:.1} mallocs/call",
                rec["instructions_per_call"], rec["instructions_per_call_without_emulated"], rec["mallocs_per_call"]
            );
            self.records.push(rec);
        }
    }
}

/// `callgrind_control` with `args`, and whether it succeeded.
fn control(args: &[&str]) -> bool {
    Command::new("callgrind_control")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A callgrind dump read: each function's own instructions, and the calls to `malloc`.
struct Counts {
    own: HashMap<String, u64>,
    mallocs: u64,
}

impl Counts {
    /// Reads the uncompressed format (`--compress-strings=no --compress-pos=no`): `fn=`
    /// names the function the cost lines below belong to; a `calls=` line makes the next
    /// cost line the callee's inclusive cost, not the caller's own.
    fn read(text: &str) -> Counts {
        let mut own: HashMap<String, u64> = HashMap::new();
        let (mut func, mut callee) = (String::new(), String::new());
        let (mut after_calls, mut mallocs) = (false, 0u64);
        for line in text.lines() {
            if let Some(f) = line.strip_prefix("fn=") {
                func = f.to_owned();
            } else if let Some(f) = line.strip_prefix("cfn=") {
                callee = f.to_owned();
            } else if let Some(c) = line.strip_prefix("calls=") {
                after_calls = true;
                if callee == "malloc" {
                    let n = c.split_whitespace().next().and_then(|n| n.parse().ok());
                    mallocs += n.unwrap_or(0);
                }
            } else if line.starts_with(|c: char| c.is_ascii_digit() || "+-*".contains(c)) {
                if std::mem::take(&mut after_calls) {
                    continue;
                }
                let cost = line.split_whitespace().nth(1).and_then(|v| v.parse().ok());
                *own.entry(func.clone()).or_default() += cost.unwrap_or(0);
            }
        }
        Counts { own, mallocs }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_costs_leave_out_callees() {
        let text = "fn=a\n1 10\ncfn=malloc\ncalls=3 5\n2 400\n3 7\nfn=malloc\n5 100\n";
        let c = Counts::read(text);
        assert_eq!(c.own["a"], 17);
        assert_eq!(c.own["malloc"], 100);
        assert_eq!(c.mallocs, 3);
    }
}
