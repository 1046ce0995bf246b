//! Client commands: they talk to a running daemon over its HTTP API.

fn block<F: std::future::Future<Output = i32>>(f: F) -> i32 {
    actix::System::new().block_on(f)
}

async fn get(url: String) -> Result<serde_json::Value, String> {
    let client = awc::Client::default();
    let mut r = client.get(&url).send().await.map_err(|e| e.to_string())?;
    r.json::<serde_json::Value>()
        .limit(64 << 20)
        .await
        .map_err(|e| e.to_string())
}

pub fn status(daemon: &str) -> i32 {
    let url = format!("{}/healthz", daemon.trim_end_matches('/'));
    block(async move {
        match get(url).await {
            Ok(v) => {
                println!("{v}");
                0
            }
            Err(e) => {
                eprintln!("albedo-mcp: the daemon does not answer: {e}");
                1
            }
        }
    })
}

pub fn tools(daemon: &str) -> i32 {
    let base = daemon.trim_end_matches('/').to_owned();
    block(async move {
        let client = awc::Client::default();
        let created = async {
            let mut r = client
                .post(format!("{base}/sessions"))
                .send_json(&serde_json::json!({}))
                .await
                .map_err(|e| e.to_string())?;
            r.json::<serde_json::Value>()
                .await
                .map_err(|e| e.to_string())
        }
        .await;
        let id = match created {
            Ok(v) => v
                .get("id")
                .and_then(|x| x.as_str())
                .unwrap_or("")
                .to_owned(),
            Err(e) => {
                eprintln!("albedo-mcp: cannot create a session: {e}");
                return 1;
            }
        };
        match get(format!("{base}/sessions/{id}/tools")).await {
            Ok(v) => {
                for t in v
                    .get("tools")
                    .and_then(|t| t.as_array())
                    .into_iter()
                    .flatten()
                {
                    println!("{}", t.get("name").and_then(|n| n.as_str()).unwrap_or(""));
                }
                let _ = client.delete(format!("{base}/sessions/{id}")).send().await;
                0
            }
            Err(e) => {
                eprintln!("albedo-mcp: {e}");
                1
            }
        }
    })
}
