//! A console on a free port over a test world, and a headless Chromium
//! session (chromedriver on a free port of its own) to drive it.

use std::process::Stdio;
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use invoice_reminder::config::{ConfigSource, Settings};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::common::{self, World};

pub const OPERATOR: (&str, &str) = ("olga", "operator password");
pub const VIEWER: (&str, &str) = ("vic", "viewer password");

/// A console serving `world`, stopped when dropped.
pub struct Console {
    pub url: String,
    stop: CancellationToken,
    _config: tempfile_path::TempConfig,
}

impl Drop for Console {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

mod tempfile_path {
    /// A configuration file removed when dropped.
    pub struct TempConfig(pub std::path::PathBuf);
    impl Drop for TempConfig {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

/// The world's settings with an operator and a viewer.
pub fn settings(world: &World) -> (Settings, tempfile_path::TempConfig) {
    let mut text = std::fs::read_to_string(common::default_config_path()).unwrap();
    text = text.replace("users = []\n", "");
    for ((name, password), role) in [(OPERATOR, "operator"), (VIEWER, "viewer")] {
        let phc = invoice_reminder::console::password_phc(password).unwrap();
        text.push_str(&format!(
            "\n[[console.users]]\nname = \"{name}\"\npassword_hash = \"{phc}\"\nrole = \"{role}\"\n"
        ));
    }
    let path = std::env::temp_dir().join(format!("console-{}.toml", uuid::Uuid::new_v4()));
    std::fs::write(&path, text).unwrap();
    let settings = Settings::load(&ConfigSource {
        path: Some(path.clone()),
        env: world.env(),
    })
    .unwrap();
    (settings, tempfile_path::TempConfig(path))
}

pub async fn start(world: &World) -> Console {
    let (settings, config) = settings(world);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    let db = invoice_reminder::db::Db::new(world.pool().clone(), &settings);
    // The world's pool searches our schema first; the console names it anyway.
    tokio::spawn(invoice_reminder::console::serve(
        settings,
        db,
        listener,
        stop.clone(),
    ));
    Console {
        url,
        stop,
        _config: config,
    }
}

/// chromedriver and one headless Chromium session; both end when dropped.
pub struct Browser {
    pub client: Client,
    driver: tokio::process::Child,
}

impl Browser {
    pub async fn open() -> Self {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let driver = tokio::process::Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("chromedriver (apt-get install chromium-driver)");
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({"args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                "--disable-dev-shm-usage", "--window-size=1200,900"]}),
        );
        let url = format!("http://127.0.0.1:{port}");
        let mut last = None;
        for _ in 0..100 {
            match ClientBuilder::new(HttpConnector::new())
                .capabilities(caps.clone())
                .connect(&url)
                .await
            {
                Ok(client) => return Self { client, driver },
                Err(e) => last = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("chromedriver did not start: {last:?}");
    }

    pub async fn goto(&self, url: &str) {
        self.client.goto(url).await.unwrap();
    }

    pub async fn text(&self, css: &str) -> String {
        self.client
            .wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"))
            .text()
            .await
            .unwrap()
    }

    pub async fn count(&self, key: &str) -> i64 {
        self.text(&format!("[data-count=\"{key}\"]"))
            .await
            .trim()
            .parse()
            .unwrap()
    }

    pub async fn fill(&self, css: &str, value: &str) {
        let field = self
            .client
            .wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"));
        field.clear().await.unwrap();
        field.send_keys(value).await.unwrap();
    }

    /// Clicks `css` once it is on the page (a page just navigated to may
    /// still be loading).
    pub async fn click(&self, css: &str) {
        self.client
            .wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"))
            .click()
            .await
            .unwrap();
    }

    /// Clicks `css` (a submit button) and waits for the new page at
    /// `path`: the page it leaves is marked first, so a form that answers
    /// with the page it was on is not mistaken for its answer.
    pub async fn submit(&self, css: &str, path: &str) {
        self.client
            .execute("window.__left = true", vec![])
            .await
            .unwrap();
        self.click(css).await;
        common::wait_until(path, Duration::from_secs(10), || async {
            let left = self
                .client
                .execute("return window.__left === true", vec![])
                .await
                .is_ok_and(|v| v == true);
            !left && self.path().await == path
        })
        .await;
        self.wait_for_page(path).await;
    }

    /// Waits until the page has an element matching `css`.
    pub async fn wait_for(&self, css: &str) {
        common::wait_until(css, Duration::from_secs(10), || async {
            self.client.find(Locator::Css(css)).await.is_ok()
        })
        .await;
    }

    /// Waits until the browser shows a loaded page at `path`.
    pub async fn wait_for_page(&self, path: &str) {
        common::wait_until(path, Duration::from_secs(10), || async {
            self.path().await == path
                && self
                    .client
                    .execute("return document.readyState", vec![])
                    .await
                    .is_ok_and(|v| v == "complete")
        })
        .await;
    }

    pub async fn sign_in(&self, console: &Console, user: (&str, &str)) {
        self.sign_in_at(&console.url, user).await;
    }

    /// Signs in on the console whose root is `root`.
    pub async fn sign_in_at(&self, root: &str, (name, password): (&str, &str)) {
        self.goto(&format!("{root}/login")).await;
        self.fill("input[name=username]", name).await;
        self.fill("input[name=password]", password).await;
        self.click("form.login button").await;
        common::wait_until(
            "the answer to signing in",
            Duration::from_secs(10),
            || async {
                self.client
                    .execute("return document.readyState", vec![])
                    .await
                    .is_ok_and(|v| v == "complete")
                    && (self.path().await.ends_with('/')
                        || self.client.find(Locator::Css("#login-error")).await.is_ok())
            },
        )
        .await;
    }

    pub async fn path(&self) -> String {
        self.client.current_url().await.unwrap().path().to_owned()
    }

    /// Saves a screenshot as docs/console/{name}.png.
    pub async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.unwrap();
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("docs/console")
            .join(format!("{name}.png"));
        std::fs::write(path, png).unwrap();
    }

    pub async fn close(mut self) {
        let _ = self.client.clone().close().await;
        let _ = self.driver.kill().await;
    }
}

/// The status of a form POST to `url` with `cookie`, outside the browser
/// (WebDriver does not show status codes).
pub async fn post_status(url: &str, body: &str, cookie: Option<&str>) -> u16 {
    use http_body_util::Full;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<bytes_of::Bytes>>();
    let mut request =
        hyper::Request::post(url).header("content-type", "application/x-www-form-urlencoded");
    if let Some(c) = cookie {
        request = request.header("cookie", c);
    }
    let request = request
        .body(Full::new(bytes_of::Bytes::from(body.to_owned())))
        .unwrap();
    client.request(request).await.unwrap().status().as_u16()
}

/// The status of a GET of `url` with `cookie`, and its header `name`.
pub async fn get_header(url: &str, cookie: &str, name: &str) -> (u16, String) {
    use http_body_util::Empty;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Empty<bytes_of::Bytes>>();
    let request = hyper::Request::get(url)
        .header("cookie", cookie)
        .body(Empty::new())
        .unwrap();
    let response = client.request(request).await.unwrap();
    let value = response
        .headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (response.status().as_u16(), value)
}

mod bytes_of {
    pub use hyper::body::Bytes;
}

/// Makes the reminder of `invoice` an unknown delivery: started, left
/// `sending` (with its stored Message-ID) by a run that has ended.
pub async fn make_unknown(world: &World, invoice: i64) -> (i64, String) {
    sqlx::query_as(
        "UPDATE reminders SET status = 'sending', sent_at = NULL
          WHERE invoice_id = $1::text RETURNING id, message_id",
    )
    .bind(invoice)
    .fetch_one(world.pool())
    .await
    .unwrap()
}

pub async fn status_of(world: &World, reminder: i64) -> String {
    sqlx::query_scalar("SELECT status FROM reminders WHERE id = $1")
        .bind(reminder)
        .fetch_one(world.pool())
        .await
        .unwrap()
}

pub async fn tick(world: &World) {
    invoice_reminder::tick::run_tick(&world.context().await, &CancellationToken::new())
        .await
        .unwrap();
}
