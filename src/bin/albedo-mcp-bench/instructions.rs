//! Instructions per call (`--only instructions`), counted by valgrind's callgrind, for the
//! daemon's API and for every client of the round trips. The daemon runs under callgrind, its
//! counters zeroed after a warm-up and dumped after a fixed number of calls through its API
//! over TCP. Each client (the floor, albedo, rmcp, the TypeScript SDK) runs the same echo job
//! under callgrind twice, with a fixed number of calls each time: the difference between the
//! two runs' counts, over the difference in calls, is its count per call, with its start-up,
//! its connection and its tools list cancelled out (the server is not counted: valgrind does
//! not follow the processes a client starts). Instruction counts repeat to a fraction of a
//! percent from run to run, on a machine whose timings move by a third, so a change to the
//! call path shows here when the timed scenarios cannot see it. They count user-space work
//! only: no system call, no wait, no cache miss. The TypeScript client runs under valgrind
//! with `--smc-check=all-non-file` (V8 writes the code it runs).
//!
//! Two functions run differently under valgrind and are counted apart: `memset` for a large
//! block is one `rep stosb`, which valgrind counts once per byte (actix-http clears an array
//! of 96 header slots, 3 KiB, each time it tries to parse a request, 5 to 6 times for each:
//! 18,000 of the count, some 800 cycles on the machine), and valgrind hides SHA-NI, so
//! `sha2` hashes the API token (and, over HTTP, each response's id for the seen-set) in
//! software.
//!
//! Owns: the `instructions` records. Must not touch: the other scenarios.

use super::*;
use std::collections::HashMap;

/// Calls counted at each level through the API, after a warm-up of a tenth of as many.
const COUNTED: [(&str, &str, usize, u64); 4] = [
    ("stdio", "mcp__bench__echo", 1, 1_000),
    ("stdio", "mcp__bench__echo", 16, 4_000),
    ("http", "mcp__benchhttp__echo", 1, 1_000),
    ("http", "mcp__benchhttp__echo", 16, 4_000),
];

/// A client's two runs: this many calls in flight times `SHORT`, then that plus [`more`] calls.
const SHORT: u64 = 20;

/// The calls the second run of `who` makes beyond the first: fewer for the TypeScript client,
/// which runs some 100 times slower under valgrind than natively (its count per call is in
/// the millions over HTTP, so 300 calls are plenty).
fn more(who: &str) -> u64 {
    if who == TS {
        300
    } else {
        1_000
    }
}

/// The functions valgrind runs differently (see the module's comment).
fn emulated(name: &str) -> bool {
    name.starts_with("__memset") || name.starts_with("sha2::")
}

const SCENARIO: &str = "instructions";

/// The valgrind command line before the program, its dump written to `out`.
fn callgrind(out: &Path, jit: bool) -> Vec<String> {
    let mut v: Vec<String> = [
        "valgrind",
        "--tool=callgrind",
        "--dump-instr=no",
        "--compress-strings=no",
        "--compress-pos=no",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if jit {
        v.push("--smc-check=all-non-file".into());
    }
    v.push(format!("--callgrind-out-file={}", out.display()));
    v
}

impl Bench {
    pub(crate) fn instructions(&mut self) {
        println!("\n== instructions per call (callgrind) ==");
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
        self.client_instructions();
        self.api_instructions();
    }

    /// The daemon under callgrind: its counters zeroed after a warm-up at each level and
    /// dumped after that level's calls.
    fn api_instructions(&mut self) {
        let ext = json!({"enabled": {"mcp": true}, "mcp": {"servers": {
            "bench": {"type": "stdio", "command": self.exe, "args": ["__stdio-server"]},
            "benchhttp": {"type": "http", "url": format!("http://127.0.0.1:{}/mcp", self.http_port())},
        }}});
        let out = self.scratch.0.join("callgrind.out");
        let wrapper = callgrind(&out, false);
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
            self.keep_dump(&dump, API, transport, c);
            let mut rec = counts.record(lat.len() as u64, API, transport, c);
            rec["errors"] = json!(errors);
            self.push(rec);
        }
    }

    /// Each client of the round trips, on each level it runs there (the floor at one call
    /// in flight only): two runs under callgrind, `SHORT` x in flight calls and then [`more`]
    /// calls more, and the difference between them.
    fn client_instructions(&mut self) {
        let args = json!({"message": "hello"});
        for (transport, _, c, _) in COUNTED {
            let (target, clients) = if transport == "stdio" {
                (self.stdio_target(&[]), vec![FLOOR, ALBEDO, RMCP, TS])
            } else {
                (
                    self.http_target("/mcp"),
                    vec![FLOOR, ALBEDO, RMCP, RMCP_POOLED, TS],
                )
            };
            for who in clients {
                if who == FLOOR && c != 1 {
                    continue;
                }
                let short = SHORT * c as u64;
                let mut runs = Vec::new();
                for n in [short, short + more(who)] {
                    match self.client_run(who, &target, &args, transport, c, n) {
                        Ok(Some(run)) => runs.push(run),
                        Ok(None) => break, // left out of this run
                        Err(e) => {
                            self.fail(format!(
                                "{who} under callgrind ({transport}, {c} in flight, {n} calls): {e}"
                            ));
                            break;
                        }
                    }
                }
                if let [(a, _), (b, dump)] = &runs[..] {
                    // The longer run's dump is the one worth reading.
                    self.keep_dump(dump, who, transport, c);
                    let rec = b.minus(a).record(more(who), who, transport, c);
                    self.push(rec);
                }
            }
        }
    }

    /// One run of client `who` under callgrind: `n` calls at `c` in flight, its counts and
    /// its dump's path; `None` when this run leaves the client out (`--no-rmcp`, `--no-ts`).
    fn client_run(
        &self,
        who: &str,
        target: &Value,
        args: &Value,
        transport: &str,
        c: usize,
        n: u64,
    ) -> Result<Option<(Counts, PathBuf)>, String> {
        let mut j = job(target, "echo", args.clone(), &[c as u64], &self.sizes);
        j["calls"] = json!(n);
        let Some((cmd, _)) = self.client_command(who, &j) else {
            return Ok(None);
        };
        let dir = self.scratch.0.join(format!("cg-{who}-{transport}-{c}-{n}"));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let wrapper = callgrind(&dir.join("callgrind.%p.out"), who == TS);
        let mut v = Command::new(&wrapper[0]);
        v.args(&wrapper[1..])
            .arg(cmd.get_program())
            .args(cmd.get_args());
        for (k, val) in cmd.get_envs() {
            match val {
                Some(val) => v.env(k, val),
                None => v.env_remove(k),
            };
        }
        let out = procs::run_json(v, Duration::from_secs(600))?;
        let level = &out["levels"][0];
        if level["calls"].as_u64() != Some(n) || level["errors"].as_u64() != Some(0) {
            return Err(format!("the client said {out}"));
        }
        // The client's own dump: the largest (a process it forked and that exited before its
        // `exec` may leave a small one).
        let mut best: Option<(u64, PathBuf)> = None;
        for e in std::fs::read_dir(&dir)
            .map_err(|e| e.to_string())?
            .flatten()
        {
            let size = e.metadata().map(|m| m.len()).unwrap_or(0);
            if best.as_ref().is_none_or(|(s, _)| size > *s) {
                best = Some((size, e.path()));
            }
        }
        let (_, dump) = best.ok_or("callgrind wrote no dump")?;
        let text = std::fs::read_to_string(&dump).map_err(|e| e.to_string())?;
        Ok(Some((Counts::read(&text), dump)))
    }

    /// With `BENCH_CALLGRIND_DIR`, a copy of the dump for `callgrind_annotate` or a reader
    /// of one's own (the scratch folder is removed at the end of the run).
    fn keep_dump(&self, dump: &Path, who: &str, transport: &str, c: usize) {
        if let Some(dir) = std::env::var_os("BENCH_CALLGRIND_DIR") {
            let to = PathBuf::from(dir).join(format!("callgrind.{who}.{transport}-c{c}.out"));
            if let Err(e) = std::fs::copy(dump, &to) {
                eprintln!("callgrind dump not kept at {}: {e}", to.display());
            }
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
    /// What `self` counted beyond `before`, function by function (one counted less in
    /// `self` counts 0).
    fn minus(&self, before: &Counts) -> Counts {
        let mut own = self.own.clone();
        for (f, v) in &before.own {
            let e = own.entry(f.clone()).or_default();
            *e = e.saturating_sub(*v);
        }
        Counts {
            own,
            mallocs: self.mallocs.saturating_sub(before.mallocs),
        }
    }

    /// The record of `calls` calls that these counts are the cost of.
    fn record(&self, calls: u64, who: &str, transport: &str, c: usize) -> Value {
        let n = calls.max(1) as f64;
        let total: u64 = self.own.values().sum();
        let apart: u64 = self
            .own
            .iter()
            .filter(|(f, _)| emulated(f))
            .map(|(_, v)| v)
            .sum();
        let mut top: Vec<(&String, &u64)> = self.own.iter().collect();
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
        json!({
            "scenario": SCENARIO,
            "client": who,
            "transport": transport,
            "concurrency": c,
            "calls": calls,
            "instructions_per_call": (total as f64 / n).round(),
            "instructions_per_call_without_emulated": ((total - apart) as f64 / n).round(),
            "emulated": "memset (rep stosb counted per byte) and sha2 (software, as valgrind hides SHA-NI)",
            "mallocs_per_call": (self.mallocs as f64 / n * 10.0).round() / 10.0,
            "top_own_instructions_per_call": top,
            "counted": if who == API {
                "the daemon alone, counters zeroed after a warm-up"
            } else {
                "the client process alone, the difference between two runs of a fixed number of calls"
            },
        })
    }

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

    #[test]
    fn a_difference_counts_what_the_longer_run_added() {
        let short = Counts::read("fn=start\n1 500\nfn=call\n1 100\ncfn=malloc\ncalls=2 5\n2 9\n");
        let long = Counts::read(
            "fn=start\n1 500\nfn=call\n1 1100\ncfn=malloc\ncalls=22 5\n2 99\nfn=late\n1 4\n",
        );
        let d = long.minus(&short);
        assert_eq!(d.own["start"], 0);
        assert_eq!(d.own["call"], 1000);
        assert_eq!(d.own["late"], 4);
        assert_eq!(d.mallocs, 20);
        let r = d.record(10, ALBEDO, "stdio", 1);
        assert_eq!(r["instructions_per_call"], 100.0);
        assert_eq!(r["mallocs_per_call"], 2.0);
        assert_eq!(r["scenario"], SCENARIO);
    }
}
