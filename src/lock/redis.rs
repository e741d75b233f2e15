//! The Redis backend: `SET NX PX` to acquire (with the fencing token drawn
//! from `{lock.key}:fence` in the same script), Lua scripts to renew and
//! release only while the key still holds our token.
//!
//! The two keys are touched by one script, so on Redis Cluster they would
//! need the same hash slot; this backend targets a single Redis (or a
//! primary with replicas), where that does not arise.
//!
//! One [`ConnectionManager`] per process, created lazily so a replica starts
//! (and keeps scheduling) while Redis is down; it reconnects by itself.
//! Every command has a response timeout (`redis.timeout`): a reply that does
//! not arrive in time is treated as lost, which for `SET NX` makes the result
//! ambiguous (see [`RedisLock::try_acquire`]).

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncConnectionConfig, RedisError, Script};
use secrecy::ExposeSecret;
use uuid::Uuid;

use super::{AcquireResult, Handle, Holder, LeaseTimes, LockError, Released, Renewal};
use crate::config::Settings;

/// Lua that draws the next fencing token from KEYS[2], lifted above
/// ARGV[2] (the database's high-water mark) in case Redis lost the counter,
/// and returns it. Shared by the two scripts below.
macro_rules! draw_fence {
    () => {
        r#"
  local fence = redis.call('INCR', KEYS[2])
  local floor = tonumber(ARGV[2])
  if fence <= floor then
    fence = floor + 1
    redis.call('SET', KEYS[2], fence)
  end
  return fence
"#
    };
}

/// `SET key token NX PX ttl` (ARGV[1] token, ARGV[3] ttl ms); when it
/// succeeds, the fencing token; 0 when the lock is held by someone else.
const ACQUIRE: &str = concat!(
    "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[3]) then",
    draw_fence!(),
    "end\nreturn 0\n"
);

/// After an ambiguous acquire: if the key holds our token (ARGV[1]), our
/// fencing token, as ACQUIRE would have drawn it; otherwise 0.
const FENCE_IF_OURS: &str = concat!(
    "if redis.call('GET', KEYS[1]) == ARGV[1] then",
    draw_fence!(),
    "end\nreturn 0\n"
);

/// Extends the key only while it holds our token. 1: renewed, 0: gone,
/// -1: another token.
const RENEW: &str = r#"
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
elseif v == false then
  return 0
end
return -1
"#;

/// Deletes the key only while it holds our token, or, when ARGV[2] > 0,
/// shortens its life to ARGV[2] ms (min_hold). 1: deleted, 2: left to
/// expire, 0: not ours.
const RELEASE: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  local hold = tonumber(ARGV[2])
  if hold > 0 then
    redis.call('PEXPIRE', KEYS[1], hold)
    return 2
  end
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
"#;

#[derive(Clone)]
pub struct RedisLock {
    pub(crate) key: String,
    /// `{key}:fence`: the fencing token counter.
    fence_key: String,
    pub(crate) times: LeaseTimes,
    timeout: Duration,
    /// `redis.url` without its password, for messages.
    redacted_url: String,
    /// For the one-off ambiguity check, on a connection of its own.
    client: redis::Client,
    conn: ConnectionManager,
}

impl RedisLock {
    /// Builds the client without connecting. Must be called inside a tokio
    /// runtime.
    pub(super) fn new(settings: &Settings, times: LeaseTimes) -> Result<Self, LockError> {
        let client = redis::Client::open(settings.redis.url.expose_secret())
            .map_err(|e| backend("invalid redis.url", &e))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(settings.redis.timeout))
            .set_response_timeout(Some(settings.redis.timeout))
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_millis(500));
        let conn = ConnectionManager::new_lazy_with_config(client.clone(), config)
            .map_err(|e| backend("cannot create the Redis connection manager", &e))?;
        Ok(Self {
            key: settings.lock.key.clone(),
            fence_key: format!("{}:fence", settings.lock.key),
            times,
            timeout: settings.redis.timeout,
            redacted_url: settings.redis.redacted_url(),
            client,
            conn,
        })
    }

    /// `SET key token NX PX ttl` (and the fencing token, atomically). When
    /// the reply is lost we do not know whether the key was set; we ask once,
    /// on a fresh connection, whether it holds our token, and never retry
    /// with a new one.
    pub(super) async fn try_acquire(
        &self,
        token: Uuid,
        fence_floor: i64,
    ) -> Result<AcquireResult, LockError> {
        let mut conn = self.conn.clone();
        let reply: Result<i64, RedisError> = Script::new(ACQUIRE)
            .key(&self.key)
            .key(&self.fence_key)
            .arg(token.to_string())
            .arg(fence_floor)
            .arg(millis(self.times.ttl))
            .invoke_async(&mut conn)
            .await;
        let won = |fence| AcquireResult::Won {
            handle: Handle::Redis { token },
            fence,
        };
        match reply {
            Ok(0) => Ok(AcquireResult::Held),
            Ok(fence) => Ok(won(fence)),
            Err(e) if is_refused_login(&e) => Err(self.refused(&e)),
            Err(e) if e.is_connection_refusal() => {
                Err(backend("cannot reach Redis to take the lock", &e))
            }
            Err(e) => {
                tracing::warn!(error = %e, "lock SET result unknown; checking whether the key holds our token");
                let fence = self
                    .fence_if_ours_on_fresh_connection(token, fence_floor)
                    .await
                    .map_err(|e| backend("cannot check the lock after an ambiguous SET", &e))?;
                Ok(if fence > 0 {
                    won(fence)
                } else {
                    AcquireResult::Unknown
                })
            }
        }
    }

    /// The one check after an ambiguous acquire, on a new connection: the
    /// shared one may still be waiting for the lost reply.
    async fn fence_if_ours_on_fresh_connection(
        &self,
        token: Uuid,
        fence_floor: i64,
    ) -> Result<i64, RedisError> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout));
        let mut conn = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        Script::new(FENCE_IF_OURS)
            .key(&self.key)
            .key(&self.fence_key)
            .arg(token.to_string())
            .arg(fence_floor)
            .invoke_async(&mut conn)
            .await
    }

    fn refused(&self, e: &RedisError) -> LockError {
        LockError::Config(format!(
            "redis.url: Redis at {} refused our credentials or permissions ({}); check the user and password in redis.url",
            self.redacted_url,
            e.code().unwrap_or("authentication failed")
        ))
    }

    pub(super) async fn renew(&self, token: Uuid) -> Result<Renewal, LockError> {
        let mut conn = self.conn.clone();
        let found: i64 = Script::new(RENEW)
            .key(&self.key)
            .arg(token.to_string())
            .arg(millis(self.times.ttl))
            .invoke_async(&mut conn)
            .await
            .map_err(|e| backend("lock renewal failed", &e))?;
        Ok(match found {
            1 => Renewal::Renewed,
            0 => Renewal::Gone,
            _ => Renewal::Stolen,
        })
    }

    pub(super) async fn release(
        &self,
        token: Uuid,
        hold_for: Option<Duration>,
    ) -> Result<Released, LockError> {
        let mut conn = self.conn.clone();
        let hold_ms = hold_for.map(millis).unwrap_or(0);
        let done: i64 = Script::new(RELEASE)
            .key(&self.key)
            .arg(token.to_string())
            .arg(hold_ms)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| backend("lock release failed", &e))?;
        Ok(match (done, hold_for) {
            (1, _) => Released::Deleted,
            (2, Some(left)) => Released::HeldForMinHold(left),
            (2, None) => Released::Deleted,
            _ => Released::NotOwner,
        })
    }

    /// One PING on the shared connection (readiness).
    pub(super) async fn ping(&self) -> Result<(), LockError> {
        let mut conn = self.conn.clone();
        redis::cmd("PING")
            .query_async::<()>(&mut conn)
            .await
            .map_err(|e| backend("Redis does not answer", &e))
    }

    pub(super) async fn holder(&self) -> Result<Option<Holder>, LockError> {
        let mut conn = self.conn.clone();
        let (token, ttl): (Option<String>, i64) = redis::pipe()
            .cmd("GET")
            .arg(&self.key)
            .cmd("PTTL")
            .arg(&self.key)
            .query_async(&mut conn)
            .await
            .map_err(|e| backend("cannot read the lock", &e))?;
        Ok(token.map(|token| Holder {
            token: Some(token),
            ttl_left_ms: (ttl >= 0).then_some(ttl),
            ..Holder::default()
        }))
    }
}

/// Milliseconds for PX/PEXPIRE, rounded up so a lease is never shorter
/// than asked, and at least 1.
fn millis(d: Duration) -> u64 {
    let ms = d.as_nanos().div_ceil(1_000_000);
    u64::try_from(ms).unwrap_or(u64::MAX).max(1)
}

/// Redis refused our credentials or permissions (WRONGPASS, NOAUTH,
/// NOPERM): a configuration error, never an ambiguous reply.
fn is_refused_login(e: &RedisError) -> bool {
    matches!(
        e.kind(),
        redis::ErrorKind::AuthenticationFailed
            | redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm)
    ) || e
        .code()
        .is_some_and(|code| matches!(code, "WRONGPASS" | "NOAUTH" | "NOPERM"))
}

fn backend(what: &str, e: &RedisError) -> LockError {
    LockError::Backend(format!("{what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millis_round_up_and_are_never_zero() {
        assert_eq!(millis(Duration::from_micros(1)), 1);
        assert_eq!(millis(Duration::from_micros(1500)), 2);
        assert_eq!(millis(Duration::from_secs(2)), 2000);
        assert_eq!(millis(Duration::ZERO), 1);
    }
}
