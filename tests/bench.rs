//! The benchmark's contract (README, "Benchmarks"), in its quick mode (tiny sizes, a debug
//! build: figures mean nothing here, their presence does): one run measures every client side
//! by side on the same servers (the floor at one call in flight, albedo's client, rmcp, the
//! TypeScript SDK v2 client, the daemon's API over TCP and over its Unix socket, the relay) at 1, 16 and 256 calls in flight, the real
//! servers, the Python binding beside httpx, session open, large results and scale, and its
//! `--json` output has one record per measurement with the figures the issue names, the
//! ratios and the targets. A client or step that cannot run fails the run. This is the run that keeps the bench from rotting.

mod common;
use serde_json::Value;
use std::process::Command;

#[test]
fn a_quick_run_measures_everything_the_issue_names_and_writes_the_records() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let out = Command::new(env!("CARGO_BIN_EXE_albedo-mcp-bench"))
        .args(["--quick", "--json"])
        .arg(&json)
        .env("ALBEDO_PEERS", common::peers())
        .output()
        .expect("the bench");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{}\n{stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
    let doc: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let records = doc["records"].as_array().unwrap();
    let find = |scenario: &str, client: &str, c: u64| {
        records
            .iter()
            .find(|r| r["scenario"] == scenario && r["client"] == client && r["concurrency"] == c)
            .unwrap_or_else(|| panic!("no record for {scenario} {client} c={c}"))
    };
    for scenario in ["roundtrip_stdio", "roundtrip_http"] {
        let rmcp = if scenario == "roundtrip_http" {
            "rmcp-pooled"
        } else {
            "rmcp"
        };
        for c in [1, 16, 256] {
            let mut clients = vec![
                "albedo",
                rmcp,
                "ts-sdk-v2",
                "albedo-daemon-api",
                "albedo-daemon-api-socket",
            ];
            if c == 1 {
                clients.push("floor");
                // TCP and the socket compared call by call.
                let p = find(scenario, "albedo-daemon-api-paired", 1);
                assert!(p.get("failed").is_none(), "{p}");
                assert!(p["pairs"].as_u64().unwrap() > 0, "{p}");
                for k in ["tcp_p50_us", "socket_p50_us", "socket_minus_tcp_p50_us"] {
                    assert!(p[k].is_number(), "{k}: {p}");
                }
            }
            // The HTTP floor under load: the API's load generator straight at the bench's
            // HTTP server, at every level.
            let f = find("http_floor_load", "loadgen", c);
            assert!(f.get("failed").is_none(), "{f}");
            assert!(f["calls_per_s"].as_f64().unwrap() > 0.0, "{f}");
            // The relay (albedo's client behind a minimal HTTP server on one thread) under
            // the API's load generator, over stdio at every level.
            if scenario == "roundtrip_stdio" {
                clients.push("relay");
            }
            for client in clients {
                let r = find(scenario, client, c);
                assert!(r.get("failed").is_none(), "{r}");
                assert!(r["calls_per_s"].as_f64().unwrap() > 0.0, "{r}");
                for k in ["p50_us", "p99_us", "cpu_us_per_call"] {
                    assert!(r[k].is_number(), "{k}: {r}");
                }
                // The mean, which Little's law ties to calls/s (the TypeScript client's
                // levels have none).
                if client != "ts-sdk-v2" {
                    assert!(r["mean_us"].as_f64().is_some_and(|m| m > 0.0), "{r}");
                }
            }
            let ratio = doc["ratios"]
                .as_array()
                .unwrap()
                .iter()
                .find(|x| {
                    x["scenario"] == scenario
                        && x["concurrency"] == c
                        && x.get("api_adds_p50_us").is_none()
                })
                .unwrap();
            assert!(ratio["albedo_vs_rmcp_calls_per_s"].is_number(), "{ratio}");
            if scenario == "roundtrip_stdio" && c == 256 {
                // The API's share of the client's calls and of the HTTP floor's, over TCP
                // and over the socket, and the share the CPU per call allows.
                for who in ["albedo-daemon-api", "albedo-daemon-api-socket"] {
                    let share = doc["ratios"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|x| x["client"] == who && x["concurrency"] == c)
                        .unwrap_or_else(|| panic!("no share for {who}"));
                    assert!(
                        share["api_share_of_client_calls_per_s"].is_number(),
                        "{share}"
                    );
                    assert!(
                        share["api_share_of_http_floor_calls_per_s"].is_number(),
                        "{share}"
                    );
                    // What a daemon that cost no more than the floor's server and the
                    // client together could reach, in CPU.
                    assert!(
                        share["cpu_bound_share_of_client_calls_per_s"].is_number(),
                        "{share}"
                    );
                    // The relay's share and p99, measured at the same level.
                    for k in [
                        "relay_share_of_client_calls_per_s",
                        "relay_p99_over_client_p99",
                    ] {
                        assert!(share[k].is_number(), "{k}: {share}");
                    }
                    // Little's law at this level: the calls/s a p99 within 3x the client's
                    // needs at the client's spread and at the HTTP floor's, the most a daemon
                    // as cheap as the relay could make and the spread that allows, and the
                    // measured mean times calls/s (the calls in flight).
                    for k in [
                        "little_needed_calls_per_s_at_floor_spread",
                        "little_needed_calls_per_s_at_client_spread",
                        "little_api_mean_times_calls_per_s",
                        "little_most_calls_per_s_as_cheap_as_the_relay",
                        "little_spread_that_most_allows",
                    ] {
                        assert!(share[k].is_number(), "{k}: {share}");
                    }
                    for k in ["client", "http_floor", "relay", "api"] {
                        assert!(share["little_p99_over_mean"][k].is_number(), "{k}: {share}");
                    }
                }
            }
            assert!(ratio["albedo_vs_ts_calls_per_s"].is_number(), "{ratio}");
        }
        assert!(
            doc["ratios"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x["scenario"] == scenario && x["api_adds_p50_us"].is_number()),
            "what the API adds"
        );
    }
    // The Python binding beside httpx directly, over TCP and the socket, with the overhead.
    for scenario in ["python_tcp", "python_socket"] {
        for client in ["albedo-python", "httpx-raw"] {
            let r = find(scenario, client, 1);
            assert!(r["calls_per_s"].as_f64().unwrap() > 0.0, "{r}");
        }
        let r = find(scenario, "albedo-python", 1);
        assert!(r["binding_adds_us_per_call_c1"].is_number(), "{r}");
        assert!(r["binding_cpu_us_per_call_added"].is_number(), "{r}");
    }
    // Real servers: every client against Python mcp and server-everything.
    for scenario in ["real_python_stdio", "real_everything_stdio"] {
        for client in ["albedo", "rmcp", "ts-sdk-v2"] {
            let r = find(scenario, client, 1);
            assert!(r["calls_per_s"].as_f64().unwrap() > 0.0, "{r}");
        }
    }
    let one = |scenario: &str| {
        records
            .iter()
            .find(|r| r["scenario"] == scenario && r["client"] == "albedo-daemon-api")
            .unwrap_or_else(|| panic!("no record for {scenario}"))
    };
    let number = |r: &Value, k: &str| {
        assert!(r[k].as_f64().is_some_and(|x| x > 0.0), "{k}: {r}");
    };
    // Session open, warm and cold.
    number(one("session_open_warm"), "open_ms_p50");
    number(one("session_open_cold"), "over_slowest_ms_max");
    // Large results: throughput and the daemon's peak memory, over stdio, JSON and SSE,
    // through the API over TCP and over the socket.
    for s in ["large_stdio", "large_http_json", "large_http_sse"] {
        number(one(s), "mb_per_s");
        number(one(s), "daemon_peak_over_base_x_message");
        number(find(s, "albedo-daemon-api-socket", 1), "mb_per_s");
        number(
            find(s, "albedo-daemon-api-socket", 1),
            "daemon_peak_over_base_x_message",
        );
        for client in ["albedo", "rmcp", "ts-sdk-v2"] {
            number(find(s, client, 1), "mb_per_s");
        }
    }
    // The HTTP floor for one large answer: the load generator straight at the bench's HTTP
    // server; the HTTP targets over TCP read the share it allows.
    number(find("large_http_floor", "loadgen", 1), "mb_per_s");
    let targets = doc["targets"].as_array().unwrap();
    for s in ["large_http_json", "large_http_sse"] {
        let name = format!("{s}: through the API >= 80% of the client's MB/s");
        let t = targets.iter().find(|t| t["target"] == name.as_str());
        let t = t.unwrap_or_else(|| panic!("no target {name}"));
        assert!(
            t["detail"]
                .as_str()
                .unwrap()
                .contains("the HTTP floor for one such answer"),
            "{t}"
        );
    }
    // Scale: memory per idle HTTP connection and per stdio session, calls with all live.
    number(
        one("scale_http_connections"),
        "daemon_kib_per_idle_connection",
    );
    number(one("scale_http_connections"), "calls_per_s");
    number(one("scale_stdio_sessions"), "daemon_kib_per_session");
    number(one("scale_stdio_sessions"), "calls_per_s");
    // The agent fleet: every session calling once per 10 ms.
    number(one("fleet_sessions"), "calls_per_s");
    number(one("fleet_sessions"), "p99_us");
    number(one("fleet_sessions"), "windows");
    assert!(one("fleet_sessions")["windows_with_a_call_over_5ms"].is_u64());
    assert_eq!(one("fleet_sessions")["errors"], 0);
    // ...and the same fleet over the daemon's socket, the way local clients prefer.
    let socket_fleet = records
        .iter()
        .find(|r| r["scenario"] == "fleet_sessions" && r["client"] == "albedo-daemon-api-socket")
        .expect("the fleet over the socket");
    number(socket_fleet, "p99_us");
    assert_eq!(socket_fleet["errors"], 0, "{socket_fleet}");
    // The same servers and calls without the daemon, which the API's figures are read
    // against: every client alone at as many servers (session open, 1,000 HTTP servers, 200 x
    // 5 stdio servers and the fleet over them), and the load generator at the HTTP floor.
    let alone = |s: &str, client: &str| {
        let r = records
            .iter()
            .find(|r| r["scenario"] == s && r["client"] == client)
            .unwrap_or_else(|| panic!("no record for {s} {client}"));
        assert!(r.get("failed").is_none(), "{r}");
        r
    };
    for client in ["albedo", "rmcp", "ts-sdk-v2"] {
        for s in ["session_open_warm", "session_open_cold"] {
            number(alone(s, client), "open_ms_p50");
        }
        let r = alone("scale_stdio_sessions", client);
        number(r, "calls_per_s");
        number(r, "client_kib_per_session");
        assert_eq!(r["connections"], one("scale_stdio_sessions")["connections"]);
    }
    for client in ["albedo", "rmcp-pooled", "ts-sdk-v2"] {
        let r = alone("scale_http_connections", client);
        number(r, "calls_per_s");
        number(r, "client_kib_per_connection");
        assert_eq!(
            r["connections"],
            one("scale_http_connections")["connections"]
        );
    }
    for (s, client) in [
        ("fleet_sessions", "albedo"),
        ("fleet_sessions", "rmcp"),
        ("fleet_sessions", "ts-sdk-v2"),
        ("fleet_sessions", "relay"),
        ("fleet_http_floor", "loadgen"),
    ] {
        let r = records
            .iter()
            .find(|r| r["scenario"] == s && r["client"] == client)
            .unwrap_or_else(|| panic!("no record for {s} {client}"));
        number(r, "p99_us");
        assert_eq!(r["errors"], 0, "{r}");
        assert!(r["windows_with_a_call_over_5ms"].is_u64(), "{r}");
    }
    let fleets: Vec<_> = targets
        .iter()
        .filter(|t| t["target"].as_str().unwrap().starts_with("fleet:"))
        .collect();
    assert!(
        ["over TCP", "over the socket"].iter().all(|way| fleets
            .iter()
            .any(|t| t["target"].as_str().unwrap().ends_with(way))),
        "{fleets:?}"
    );
    // The machine's own stops, read at the start and before the fleet, on every core.
    for when in ["start", "scale"] {
        let probes: Vec<_> = records
            .iter()
            .filter(|r| r["scenario"] == "machine_stalls" && r["when"] == when)
            .collect();
        assert!(!probes.is_empty(), "no machine_stalls at {when}");
        for r in probes {
            assert!(r["seconds"].as_f64().is_some_and(|s| s > 0.0), "{r}");
            for k in ["gaps_over_1ms", "gaps_over_3ms"] {
                assert!(r[k].is_u64(), "{k}: {r}");
            }
            for k in ["lost_ms", "max_gap_ms"] {
                assert!(r[k].is_number(), "{k}: {r}");
            }
        }
    }
    for fleet in fleets {
        let detail = fleet["detail"].as_str().unwrap();
        assert!(detail.contains("stopped a core for over 3 ms"), "{fleet}");
        assert!(
            [
                "albedo's client alone: p99",
                "rmcp alone: p99",
                "the TypeScript client alone: p99",
                "the relay: p99",
                "the HTTP floor: p99"
            ]
            .iter()
            .all(|d| detail.contains(d)),
            "{fleet}"
        );
    }
    // Tool search: the bytes advertised at open deferred and not, search latency over
    // 5,000 tools, the ranking's share on the query set.
    number(one("tool_search_open"), "bytes_fewer_share");
    let scenario = |s: &str| {
        records
            .iter()
            .find(|r| r["scenario"] == s)
            .unwrap_or_else(|| panic!("no record for {s}"))
    };
    number(scenario("tool_search_latency"), "search_p99_us");
    number(scenario("tool_search_ranking"), "top5_share");
    assert!(records.iter().all(|r| r.get("failed").is_none()));
    let targets = doc["targets"].as_array().unwrap();
    assert!(targets.iter().all(|t| t["met"].is_boolean()));
    for named in [
        "3x TS SDK",
        "p50 <= 1.3x (client p50 + HTTP floor p50)",
        "lower over the socket than over TCP",
        ">= 25% of the client's calls/s",
        "p99 <= 3x the client's",
        ">= 80% of the client's MB/s",
        "within 2x a later one",
        "fleet:",
    ] {
        assert!(
            targets
                .iter()
                .any(|t| t["target"].as_str().unwrap().contains(named)),
            "no target {named:?}"
        );
    }
    // The p99 at 256 in flight says what Little's law asks of a daemon on this machine.
    for who in ["albedo-daemon-api", "albedo-daemon-api-socket"] {
        let name = format!("roundtrip_stdio c=256: {who} p99 <= 3x the client's");
        let t = targets.iter().find(|t| t["target"] == name.as_str());
        let t = t.unwrap_or_else(|| panic!("no target {name}"));
        assert!(
            t["detail"].as_str().unwrap().contains("by Little's law"),
            "{t}"
        );
    }
}
