//! The summary: medians over the repeats, the ratios between clients and the targets,
//! each with its figures, as the run prints them and writes them to the JSON.
//!
//! Owns: ratios and targets. Must not touch: the measurements (it reads the records only).

use super::*;

impl Bench {
    /// At 256 in flight, the share of the client's calls/s a daemon could reach that cost no
    /// more than the HTTP floor's server and the client together, in CPU per call: the load
    /// generator's own on this way in (`who`), the floor's server for an HTTP exchange that
    /// does nothing else, and the client's whole call (the cores over its calls/s). The share,
    /// and the words for the target's detail.
    fn cpu_bound(
        &self,
        scenario: &str,
        who: &str,
        c: u64,
        client_cps: f64,
    ) -> Option<(f64, String)> {
        let gen = self.median(scenario, who, c, "loadgen_cpu_us_per_call")?.0;
        let server = self
            .median(HTTP_FLOOR_SCENARIO, LOADGEN, c, "cpu_us_per_call")?
            .0;
        let cores = cores().max(1) as f64;
        let client_us = cores * 1e6 / client_cps.max(1.0);
        let sum = gen + server + client_us;
        let bound = cores * 1e6 / sum.max(1e-9) / client_cps.max(1.0);
        let text = format!(
            "; in CPU per call, the load generator {gen:.1} us + the floor's server {server:.1} \
             us + the client's whole call {client_us:.1} us = {sum:.1} us of the {cores:.0} \
             cores: a daemon that cost no more than that server and the client together reaches \
             at most {:.0}%",
            100.0 * bound
        );
        Some((bound, text))
    }

    /// The two targets at `c` in flight read rep by rep: each rep's `who` against the same
    /// rep's client (the medians of a run pair figures from different reps, and this VM's
    /// hours move between reps). For each rep, `who`'s share of the client's calls/s and its
    /// p99 over the client's; the words for the share's and the p99's details, how many reps
    /// met both, and how many reps were read. None with fewer than two reps.
    fn by_rep(&self, scenario: &str, who: &str, c: u64) -> Option<(String, String, usize, usize)> {
        let of = |client: &str, rep: u64| {
            self.records.iter().find(|r| {
                r["scenario"] == scenario
                    && r["client"] == client
                    && r["concurrency"] == c
                    && r["rep"] == rep
                    && r.get("failed").is_none()
            })
        };
        let mut reps: Vec<(f64, f64)> = Vec::new();
        for rep in 0..self.opts.repeat as u64 {
            let (Some(cl), Some(a)) = (of(ALBEDO, rep), of(who, rep)) else {
                continue;
            };
            let num = |r: &Value, k: &str| r[k].as_f64().unwrap_or(0.0);
            reps.push((
                num(a, "calls_per_s") / num(cl, "calls_per_s").max(1.0),
                num(a, "p99_us") / num(cl, "p99_us").max(1.0),
            ));
        }
        if reps.len() < 2 {
            return None;
        }
        let both = reps.iter().filter(|(s, p)| *s >= 0.25 && *p <= 3.0).count();
        let words = |each: &dyn Fn(&(f64, f64)) -> String| {
            let list: Vec<String> = reps.iter().map(each).collect();
            format!(
                "; rep by rep, against that rep's client: {}; both targets met in {both} of {} reps",
                list.join(", "),
                reps.len()
            )
        };
        Some((
            words(&|(s, _)| format!("{:.0}%", s * 100.0)),
            words(&|(_, p)| format!("{p:.1}x")),
            both,
            reps.len(),
        ))
    }

    /// At `c` calls in flight from a closed loop (each connection sends its next call when its
    /// last is answered), Little's law fixes the mean latency: mean = c / calls per second.
    /// A p99 within `limit_us` then needs a mean within `limit_us / s`, where s is the path's
    /// spread (its p99 over its mean), so at least `c * s / limit_us` calls per second: read
    /// at the client's own spread and at the HTTP floor's under the same load. Against that,
    /// the most calls per second a daemon as cheap as the relay could make with every core
    /// busy and none idle: the cores over the CPU per call of the load generator, the relay
    /// and the server (the client's whole call less the client's own CPU); it meets the
    /// p99 only at a spread at most `limit_us * most / (c * 1e6)`. The figures for the ratio
    /// and the words for the target's detail; none without the records.
    fn little_bound(
        &self,
        scenario: &str,
        who: &str,
        c: u64,
        limit_us: f64,
    ) -> Option<(Value, String)> {
        let spread = |scenario: &str, who: &str| -> Option<(f64, f64, f64)> {
            let x = self.median(scenario, who, c, "calls_per_s")?.0.max(1e-9);
            let p99 = self.median(scenario, who, c, "p99_us")?.0;
            // Runs before `mean_us` was recorded: the mean Little's law gives.
            let mean = self
                .median(scenario, who, c, "mean_us")
                .map_or(c as f64 * 1e6 / x, |m| m.0)
                .max(1e-9);
            Some((x, mean, p99 / mean))
        };
        let (c_x, _, c_spread) = spread(scenario, ALBEDO)?;
        let (_, _, f_spread) = spread(HTTP_FLOOR_SCENARIO, LOADGEN)?;
        let (_, _, r_spread) = spread(scenario, RELAY)?;
        let (a_x, a_mean, a_spread) = spread(scenario, who)?;
        let need = |s: f64| c as f64 * 1e6 * s / limit_us.max(1e-9);
        let (need_c, need_f) = (need(c_spread), need(f_spread));
        let cores = cores().max(1) as f64;
        let gen = self.median(scenario, who, c, "loadgen_cpu_us_per_call")?.0;
        let relay = self.median(scenario, RELAY, c, "cpu_us_per_call")?.0;
        let client_own = self.median(scenario, ALBEDO, c, "cpu_us_per_call")?.0;
        let server = (cores * 1e6 / c_x - client_own).max(0.0);
        let most = cores * 1e6 / (gen + relay + server).max(1e-9);
        let most_spread = limit_us * most / (c as f64 * 1e6);
        let ratio = json!({
            "little_api_mean_times_calls_per_s": a_mean * a_x / 1e6,
            "little_p99_over_mean": {"client": c_spread, "http_floor": f_spread,
                "relay": r_spread, "api": a_spread},
            "little_needed_calls_per_s_at_client_spread": need_c,
            "little_needed_calls_per_s_at_floor_spread": need_f,
            "little_most_calls_per_s_as_cheap_as_the_relay": most,
            "little_spread_that_most_allows": most_spread,
        });
        let text = format!(
            "; by Little's law (mean = {c} / calls per s; {who}'s mean {a_mean:.0} us x \
             {a_x:.0} calls/s = {:.0} in flight), a p99 within {limit_us:.0} us needs at least \
             {need_c:.0} calls/s at the client's own p99/mean ({c_spread:.2}) and {need_f:.0} \
             at the HTTP floor's ({f_spread:.2}); a daemon as cheap as the relay, both cores \
             busy, makes at most {most:.0} (the load generator {gen:.1} + the relay {relay:.1} \
             + the server {server:.1} us per call), which meets it only at a p99/mean of \
             {most_spread:.2} or less (the relay's {r_spread:.2}, {who}'s {a_spread:.2})",
            a_mean * a_x / 1e6,
        );
        Some((ratio, text))
    }

    /// What the probe of the machine's stops (stalls.rs) saw at `when`, summed over the
    /// cores and the repeats, as words for a target's detail; none without a record.
    fn stalls_text(&self, when: &str) -> String {
        let recs: Vec<&Value> = self
            .records
            .iter()
            .filter(|r| r["scenario"] == STALLS_SCENARIO && r["when"] == when)
            .collect();
        if recs.is_empty() {
            return String::new();
        }
        let sum = |k: &str| recs.iter().filter_map(|r| r[k].as_f64()).sum::<f64>();
        let longest = recs
            .iter()
            .filter_map(|r| r["max_gap_ms"].as_f64())
            .fold(0.0, f64::max);
        format!(
            "; the machine, idle before the step, stopped a core for over 3 ms {:.0} times in \
             {:.0} core-seconds (the longest {longest:.1} ms)",
            sum("gaps_over_3ms"),
            sum("seconds"),
        )
    }

    /// For 10 MiB over HTTP through TCP, the most a daemon can reach that holds the whole
    /// answer before it sends its own: two crossings, each at best the large-answer floor's
    /// (B/F), against the client's one (B/C): F / 2C. Words for the target's detail, or none
    /// without the floor.
    fn large_ceiling(&self, client_mbs: f64) -> String {
        let Some((f, _)) = self.median(LARGE_FLOOR_SCENARIO, LOADGEN, 1, "mb_per_s") else {
            return String::new();
        };
        format!(
            "; the HTTP floor for one such answer: {f:.0} MB/s, so a daemon that takes the \
             whole answer in before it sends reaches at most {:.0}% (two such crossings)",
            100.0 * f / (2.0 * client_mbs).max(1e-9)
        )
    }

    pub(crate) fn median(
        &self,
        scenario: &str,
        who: &str,
        c: u64,
        key: &str,
    ) -> Option<(f64, f64)> {
        let mut v: Vec<f64> = self
            .records
            .iter()
            .filter(|r| r["scenario"] == scenario && r["client"] == who && r["concurrency"] == c)
            .filter(|r| r.get("failed").is_none())
            .filter_map(|r| r[key].as_f64())
            .collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let med = pctf(&v, 0.5);
        let spread = if med > 0.0 {
            (v[v.len() - 1] - v[0]) / med * 100.0
        } else {
            0.0
        };
        Some((med, spread))
    }

    pub(crate) fn summary(&mut self) -> (Vec<Value>, Vec<Value>) {
        let mut ratios = Vec::new();
        let mut targets = Vec::new();
        let mut target = |name: String, met: bool, detail: String| {
            targets.push(json!({"target": name, "met": met, "detail": detail}));
        };
        println!(
            "\n== ratios (medians over {} rep(s); spread = (max-min)/median) ==",
            self.opts.repeat
        );
        for scenario in ["roundtrip_stdio", "roundtrip_http"] {
            for &c in &self.sizes.levels {
                let a = self.median(scenario, ALBEDO, c, "calls_per_s");
                let a99 = self.median(scenario, ALBEDO, c, "p99_us");
                let r = [RMCP, RMCP_POOLED]
                    .iter()
                    .filter_map(|w| self.median(scenario, w, c, "calls_per_s").map(|m| (*w, m)))
                    .max_by(|x, y| x.1 .0.total_cmp(&y.1 .0));
                let t = self.median(scenario, TS, c, "calls_per_s");
                let mut line = format!("{scenario} c={c}:");
                let mut rec = json!({"scenario": scenario, "concurrency": c});
                if let (Some(a), Some((rw, r))) = (a, r) {
                    let x = a.0 / r.0;
                    line += &format!(" albedo/{rw} {x:.2}x (spread {:.0}%/{:.0}%)", a.1, r.1);
                    rec["albedo_vs_rmcp_calls_per_s"] = json!(x);
                    rec["rmcp_variant"] = json!(rw);
                    target(
                        format!("{scenario} c={c}: calls/s >= rmcp"),
                        x >= 1.0,
                        format!("{x:.2}x of {rw}"),
                    );
                    let r99 = self.median(scenario, rw, c, "p99_us");
                    if let (Some(a99), Some(r99)) = (a99, r99) {
                        rec["rmcp_vs_albedo_p99"] = json!(r99.0 / a99.0.max(1.0));
                        line += &format!(", p99 {:.0} vs {:.0} us", a99.0, r99.0);
                        target(
                            format!("{scenario} c={c}: p99 <= rmcp"),
                            a99.0 <= r99.0,
                            format!("{:.0} us vs {rw} {:.0} us", a99.0, r99.0),
                        );
                    }
                }
                // The floor (one call at a time only): the best any client could do here.
                let f = self.median(scenario, FLOOR, c, "calls_per_s");
                if let (Some(a), Some(f)) = (a, f) {
                    let x = a.0 / f.0;
                    line += &format!("; albedo at {:.0}% of the floor", x * 100.0);
                    rec["albedo_vs_floor_calls_per_s"] = json!(x);
                }
                if let (Some(a), Some(t)) = (a, t) {
                    let x = a.0 / t.0;
                    line += &format!("; albedo/ts {x:.2}x");
                    rec["albedo_vs_ts_calls_per_s"] = json!(x);
                    let mut detail = format!("{x:.2}x");
                    if let Some(f) = f {
                        let most = f.0 / t.0;
                        line += &format!(" (the floor allows {most:.2}x)");
                        rec["floor_vs_ts_calls_per_s"] = json!(most);
                        detail += &format!("; a client that cost nothing would reach {most:.2}x");
                    }
                    target(
                        format!("{scenario} c={c}: calls/s >= 3x TS SDK"),
                        x >= 3.0,
                        detail,
                    );
                }
                println!("{line}");
                ratios.push(rec);
            }
            // What the API adds at p50, one call at a time.
            if let (Some(api), Some(direct)) = (
                self.median(scenario, API, 1, "p50_us"),
                self.median(scenario, ALBEDO, 1, "p50_us"),
            ) {
                let add = api.0 - direct.0;
                println!("{scenario}: the daemon API adds {add:.0} us at p50 (c=1)");
                ratios
                    .push(json!({"scenario": scenario, "concurrency": 1, "api_adds_p50_us": add}));
                target(
                    format!("{scenario}: API adds <= 150 us at p50"),
                    add <= 150.0,
                    format!("{add:.0} us"),
                );
            }
            // The daemon's own path (issue 15): at one call in flight, the API's p50 within
            // 1.3x the client's p50 plus the HTTP floor's, over TCP, and lower over the socket.
            let client1 = self.median(scenario, ALBEDO, 1, "p50_us");
            let floor1 = self.median("roundtrip_http", FLOOR, 1, "p50_us");
            if let (Some(client), Some(floor)) = (client1, floor1) {
                let bound = 1.3 * (client.0 + floor.0);
                for who in [API, API_SOCKET] {
                    if let Some(api) = self.median(scenario, who, 1, "p50_us") {
                        target(
                            format!(
                                "{scenario} c=1: {who} p50 <= 1.3x (client p50 + HTTP floor p50)"
                            ),
                            api.0 <= bound,
                            format!(
                                "{:.0} us vs {bound:.0} us (1.3 x ({:.0} + {:.0}))",
                                api.0, client.0, floor.0
                            ),
                        );
                    }
                }
            }
            // Read from the calls made in turn (both ways under the same noise); the levels
            // measured one after the other are in the detail.
            if let (Some(tcp), Some(sock), Some(diff), Some(share)) = (
                self.median(scenario, API_PAIRED, 1, "tcp_p50_us"),
                self.median(scenario, API_PAIRED, 1, "socket_p50_us"),
                self.median(scenario, API_PAIRED, 1, "socket_minus_tcp_p50_us"),
                self.median(scenario, API_PAIRED, 1, "socket_lower_share"),
            ) {
                let apart = match (
                    self.median(scenario, API, 1, "p50_us"),
                    self.median(scenario, API_SOCKET, 1, "p50_us"),
                ) {
                    (Some(t), Some(s)) => format!("; measured apart {:.0} vs {:.0} us", s.0, t.0),
                    _ => String::new(),
                };
                target(
                    format!("{scenario} c=1: the API's p50 lower over the socket than over TCP"),
                    sock.0 < tcp.0,
                    format!(
                        "calls in turn: {:.0} us vs {:.0} us, the median pair {diff:+.0} us, \
                         the socket faster in {:.0} % of pairs{apart}",
                        sock.0,
                        tcp.0,
                        share.0 * 100.0,
                        diff = diff.0,
                    ),
                );
            }
            // At the highest level over stdio: the API does at least 25 % of the client's
            // calls per second, with a p99 at most 3x the client's.
            let top = self.sizes.levels.iter().copied().max().unwrap_or(1);
            if scenario == "roundtrip_stdio" {
                let client = (
                    self.median(scenario, ALBEDO, top, "calls_per_s"),
                    self.median(scenario, ALBEDO, top, "p99_us"),
                );
                for who in [API, API_SOCKET] {
                    let api = (
                        self.median(scenario, who, top, "calls_per_s"),
                        self.median(scenario, who, top, "p99_us"),
                    );
                    if let ((Some(c), Some(c99)), (Some(a), Some(a99))) = (client, api) {
                        let share = a.0 / c.0.max(1.0);
                        let mut ratio = json!({"scenario": scenario, "concurrency": top,
                            "client": who, "api_share_of_client_calls_per_s": share,
                            "api_p99_over_client_p99": a99.0 / c99.0.max(1.0)});
                        let mut detail =
                            format!("{:.0}% ({:.0} vs {:.0} calls/s)", share * 100.0, a.0, c.0);
                        // What the same load generator gets from an HTTP server with no
                        // daemon behind it, at the same level.
                        if let Some(f) =
                            self.median(HTTP_FLOOR_SCENARIO, LOADGEN, top, "calls_per_s")
                        {
                            let (api_share, target_share) =
                                (a.0 / f.0.max(1.0), 0.25 * c.0 / f.0.max(1.0));
                            ratio["api_share_of_http_floor_calls_per_s"] = json!(api_share);
                            ratio["target_share_of_http_floor_calls_per_s"] = json!(target_share);
                            detail += &format!(
                                "; the HTTP floor under the same load: {:.0} calls/s, the API at \
                                 {:.0}% of it, the target at {:.0}%",
                                f.0,
                                100.0 * api_share,
                                100.0 * target_share
                            );
                        }
                        if let Some((bound, text)) = self.cpu_bound(scenario, who, top, c.0) {
                            ratio["cpu_bound_share_of_client_calls_per_s"] = json!(bound);
                            detail += &text;
                        }
                        // The relay (relay.rs), the least a daemon could be, measured at the
                        // same level: its share, p99 and CPU per call beside the API's.
                        if let (Some(r), Some(r99), Some(rcpu), Some(acpu)) = (
                            self.median(scenario, RELAY, top, "calls_per_s"),
                            self.median(scenario, RELAY, top, "p99_us"),
                            self.median(scenario, RELAY, top, "cpu_us_per_call"),
                            self.median(scenario, who, top, "cpu_us_per_call"),
                        ) {
                            let relay_reps = self
                                .by_rep(scenario, RELAY, top)
                                .map(|(_, _, both, n)| {
                                    format!(", both targets met in {both} of its {n} reps")
                                })
                                .unwrap_or_default();
                            ratio["relay_share_of_client_calls_per_s"] = json!(r.0 / c.0.max(1.0));
                            ratio["relay_p99_over_client_p99"] = json!(r99.0 / c99.0.max(1.0));
                            detail += &format!(
                                "; the relay (albedo's client behind a minimal HTTP server on one \
                                 thread) under the same load: {:.0}% ({:.0} calls/s, p99 {:.0} \
                                 us) at {:.1} us of its CPU per call, the API at {:.1}{relay_reps}",
                                100.0 * r.0 / c.0.max(1.0),
                                r.0,
                                r99.0,
                                rcpu.0,
                                acpu.0
                            );
                        }
                        let (rep_share, rep_p99) = match self.by_rep(scenario, who, top) {
                            Some((s, p, both, _)) => {
                                ratio["reps_meeting_both_targets"] = json!(both);
                                (s, p)
                            }
                            None => Default::default(),
                        };
                        let little = match self.little_bound(scenario, who, top, 3.0 * c99.0) {
                            Some((fields, text)) => {
                                merge(&mut ratio, &fields);
                                text
                            }
                            None => String::new(),
                        };
                        ratios.push(ratio);
                        target(
                            format!("{scenario} c={top}: {who} >= 25% of the client's calls/s"),
                            share >= 0.25,
                            detail + &rep_share,
                        );
                        // The same load generator's p99 with no daemon behind it: the
                        // least an HTTP API can have at this level on this machine.
                        let floor99 = self
                            .median(HTTP_FLOOR_SCENARIO, LOADGEN, top, "p99_us")
                            .map(|f| {
                                format!(
                                    "; the HTTP floor under the same load: p99 {:.0} us ({:.1}x \
                                     the client's)",
                                    f.0,
                                    f.0 / c99.0.max(1.0)
                                )
                            })
                            .unwrap_or_default();
                        target(
                            format!("{scenario} c={top}: {who} p99 <= 3x the client's"),
                            a99.0 <= 3.0 * c99.0,
                            format!(
                                "{:.0} us vs {:.0} us{floor99}{little}{rep_p99}",
                                a99.0, c99.0
                            ),
                        );
                    }
                }
            }
        }
        let get = |s: &str| {
            self.records
                .iter()
                .find(|r| r["scenario"] == s && r["client"] == API && r.get("failed").is_none())
        };
        if let Some(r) = get("session_open_warm") {
            let ms = r["open_ms_p50"].as_f64().unwrap_or(f64::MAX);
            target(
                format!(
                    "warm session open ({} x {}) < 20 ms",
                    r["servers"], r["tools_per_server"]
                ),
                ms < 20.0,
                format!(
                    "{ms:.1} ms at p50, {:.1} ms for the first (catalogues decoded, tools built)",
                    r["open_ms_first"].as_f64().unwrap_or(0.0)
                ),
            );
        }
        if let Some(r) = get("session_open_warm") {
            let first = r["open_ms_first"].as_f64().unwrap_or(f64::MAX);
            let p50 = r["open_ms_p50"].as_f64().unwrap_or(0.0);
            target(
                "the first warm open after the catalogues changed within 2x a later one".into(),
                first <= 2.0 * p50,
                format!("{first:.1} ms vs {p50:.1} ms at p50"),
            );
        }
        let fleet = |who: &str| {
            self.records
                .iter()
                .find(|r| r["client"] == who && r["scenario"] == fleet_scenario(who))
        };
        for (way, over) in [(API, "over TCP"), (API_SOCKET, "over the socket")] {
            let Some(r) = fleet(way) else { continue };
            let p99 = r["p99_us"].as_f64().unwrap_or(f64::MAX);
            let errors = r["errors"].as_u64().unwrap_or(u64::MAX);
            // The same schedule without the daemon: each client alone, and the HTTP floor.
            let beside: String = [
                (ALBEDO, "albedo's client alone"),
                (RMCP, "rmcp alone"),
                (TS, "the TypeScript client alone"),
                (RELAY, "the relay"),
                (LOADGEN, "the HTTP floor"),
            ]
            .iter()
            .filter_map(|(who, what)| {
                let r = fleet(who)?;
                Some(format!("; {what}: p99 {} us", r["p99_us"]))
            })
            .collect();
            let steal = r["machine_steal_ms"]
                .as_f64()
                .map(|ms| format!("; the machine's steal time during it: {ms:.0} ms"))
                .unwrap_or_default();
            let beside = beside + &steal + &self.stalls_text("scale");
            target(
                format!(
                    "fleet: {} sessions x 1 call / {} ms: API p99 < 5 ms, no error, {over}",
                    r["sessions"],
                    schedule::PERIOD_MS
                ),
                p99 < 5000.0 && errors == 0,
                format!("p99 {p99:.0} us, {errors} errors{beside}"),
            );
        }
        if let Some(r) = get("session_open_cold") {
            let over = r["over_slowest_ms_max"].as_f64().unwrap_or(f64::MAX);
            target(
                format!(
                    "cold session open ({} servers) within 150 ms of the slowest",
                    r["servers"]
                ),
                over <= 150.0,
                format!(
                    "{over:.0} ms over the slowest ({} ms)",
                    r["server_start_ms"]
                ),
            );
        }
        for s in ["large_stdio", "large_http_json", "large_http_sse"] {
            for (who, over) in [(API, ""), (API_SOCKET, " (over the socket)")] {
                let Some((mbs, _)) = self.median(s, who, 1, "mb_per_s") else {
                    continue;
                };
                // The worst peak of the repeats.
                let x = self
                    .records
                    .iter()
                    .filter(|r| r["scenario"] == s && r["client"] == who)
                    .filter(|r| r.get("failed").is_none())
                    .filter_map(|r| r["daemon_peak_over_base_x_message"].as_f64())
                    .fold(0.0, f64::max);
                target(
                    format!("{s}: >= 200 MB/s through the daemon{over}"),
                    mbs >= 200.0,
                    format!("{mbs:.0} MB/s"),
                );
                target(
                    format!("{s}: daemon peak < 3x the message{over}"),
                    x < 3.0,
                    format!("{x:.2}x"),
                );
                if let Some(c) = self.median(s, ALBEDO, 1, "mb_per_s") {
                    let share = mbs / c.0.max(1e-9);
                    let ceiling = if who == API && s != "large_stdio" {
                        self.large_ceiling(c.0)
                    } else {
                        String::new()
                    };
                    target(
                        format!("{s}: through the API >= 80% of the client's MB/s{over}"),
                        share >= 0.8,
                        format!(
                            "{:.0}% ({mbs:.0} vs {:.0} MB/s){ceiling}",
                            share * 100.0,
                            c.0
                        ),
                    );
                }
            }
        }
        if let Some(r) = get("scale_http_connections") {
            let k = r["daemon_kib_per_idle_connection"]
                .as_f64()
                .unwrap_or(f64::MAX);
            target(
                format!("{} idle HTTP connections: < 100 KiB each", r["connections"]),
                k < 100.0,
                format!("{k:.1} KiB"),
            );
        }
        if let Some(r) = get("tool_search_open") {
            let x = r["bytes_fewer_share"].as_f64().unwrap_or(0.0);
            target(
                format!(
                    "tool search: >= 90 % fewer schema bytes at open ({} x {} tools)",
                    r["servers"], r["tools_per_server"]
                ),
                x >= 0.9,
                format!(
                    "{:.1} % fewer ({} bytes deferred, {} not); {} server processes at open, {} with every tool loaded",
                    x * 100.0,
                    r["bytes_deferred"],
                    r["bytes_never"],
                    r["server_processes_deferred"],
                    r["server_processes_never"]
                ),
            );
        }
        if let Some(r) = get("tool_search_latency") {
            let p99 = r["search_p99_us"].as_f64().unwrap_or(f64::MAX);
            target(
                format!("tool search over {} tools: p99 < 1 ms", r["tools"]),
                p99 < 1000.0,
                format!(
                    "p99 {p99:.0} us, p50 {:.0} us",
                    r["search_p50_us"].as_f64().unwrap_or(0.0)
                ),
            );
        }
        if let Some(r) = get("tool_search_ranking") {
            let x = r["top5_share"].as_f64().unwrap_or(0.0);
            target(
                format!(
                    "tool search ranking: >= 90 % of {} queries in the top 5",
                    r["queries"]
                ),
                x >= 0.9,
                format!(
                    "{:.1} % in the top 5, {:.1} % first",
                    x * 100.0,
                    r["top1_share"].as_f64().unwrap_or(0.0) * 100.0
                ),
            );
        }
        for via in ["tcp", "socket"] {
            let scenario = format!("python_{via}");
            let b = self.median(&scenario, PY_BINDING, 1, "binding_adds_us_per_call_c1");
            let cpu = self.median(&scenario, PY_BINDING, 1, "binding_cpu_us_per_call_added");
            if let (Some(b), Some(cpu)) = (b, cpu) {
                let r = self.median(&scenario, PY_RAW, 1, "calls_per_s");
                let p = self.median(&scenario, PY_BINDING, 1, "calls_per_s");
                println!(
                    "{scenario} c=1: the binding adds {:.1} us per call ({:.1} us of its own CPU); {:.0} vs {:.0} calls/s with httpx directly",
                    b.0,
                    cpu.0,
                    p.map(|x| x.0).unwrap_or(0.0),
                    r.map(|x| x.0).unwrap_or(0.0)
                );
                ratios.push(json!({"scenario": scenario, "concurrency": 1,
                    "binding_adds_us_per_call": b.0, "binding_cpu_us_per_call_added": cpu.0}));
                target(
                    format!("{scenario} c=1: the Python binding adds < 100 us per call"),
                    b.0 < 100.0,
                    format!("+{:.1} us per call (its own CPU: +{:.1} us)", b.0, cpu.0),
                );
            }
        }
        println!("\n== targets ==");
        for t in &targets {
            println!(
                "{} {}: {}",
                if t["met"] == true { "MET   " } else { "MISSED" },
                t["target"].as_str().unwrap_or(""),
                t["detail"].as_str().unwrap_or("")
            );
        }
        (ratios, targets)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bench with no step run: only its records, as the summary reads them.
    fn bench_with(repeat: usize, records: Vec<Value>) -> Bench {
        let mut b = Bench::new(Opts {
            quick: true,
            json: None,
            repeat,
            only: Some(vec![]),
            rmcp: false,
            ts: false,
        });
        b.records = records;
        b
    }

    fn level(client: &str, rep: u64, calls_per_s: f64, p99_us: f64) -> Value {
        json!({"scenario": "roundtrip_stdio", "client": client, "concurrency": 256, "rep": rep,
            "calls_per_s": calls_per_s, "p99_us": p99_us})
    }

    #[test]
    fn the_targets_at_256_are_read_against_each_reps_own_client() {
        let b = bench_with(
            3,
            vec![
                level(ALBEDO, 0, 200_000.0, 2_000.0),
                level(API_SOCKET, 0, 40_000.0, 9_000.0),
                // A slow rep for the client: the API meets both against it.
                level(ALBEDO, 1, 120_000.0, 5_000.0),
                level(API_SOCKET, 1, 36_000.0, 14_000.0),
                level(ALBEDO, 2, 180_000.0, 3_000.0),
                level(API_SOCKET, 2, 50_000.0, 10_000.0),
            ],
        );
        let (share, p99, both, n) = b.by_rep("roundtrip_stdio", API_SOCKET, 256).unwrap();
        assert_eq!((both, n), (1, 3));
        assert!(share.contains("20%, 30%, 28%"), "{share}");
        assert!(p99.contains("4.5x, 2.8x, 3.3x"), "{p99}");
        assert!(p99.ends_with("both targets met in 1 of 3 reps"), "{p99}");
        // One rep says nothing rep by rep.
        let one = bench_with(1, vec![level(ALBEDO, 0, 1.0, 1.0), level(API, 0, 1.0, 1.0)]);
        assert!(one.by_rep("roundtrip_stdio", API, 256).is_none());
    }
}
