//! The Redis backend: `SET NX PX` to acquire, Lua scripts to renew and
//! release only while the key still holds our token.
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

use super::{AcquireResult, Holder, LockError, Released, Renewal};
use crate::config::Settings;

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
    pub(crate) ttl: Duration,
    pub(crate) renew_every: Duration,
    pub(crate) min_hold: Duration,
    timeout: Duration,
    /// For the one-off ambiguity check, on a connection of its own.
    client: redis::Client,
    conn: ConnectionManager,
}

impl RedisLock {
    /// Builds the client without connecting. Must be called inside a tokio
    /// runtime.
    pub fn new(settings: &Settings) -> Result<Self, LockError> {
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
            ttl: settings.lock.ttl,
            renew_every: settings.lock.renew_every,
            min_hold: settings.lock.min_hold,
            timeout: settings.redis.timeout,
            client,
            conn,
        })
    }

    /// `SET key token NX PX ttl`. When the reply is lost we do not know
    /// whether the key was set; we ask once whether it holds our token and
    /// never retry with a new one.
    pub(super) async fn try_acquire(&self, token: Uuid) -> Result<AcquireResult, LockError> {
        let mut conn = self.conn.clone();
        let reply: Result<Option<String>, RedisError> = redis::cmd("SET")
            .arg(&self.key)
            .arg(token.to_string())
            .arg("NX")
            .arg("PX")
            .arg(millis(self.ttl))
            .query_async(&mut conn)
            .await;
        match reply {
            Ok(Some(_)) => Ok(AcquireResult::Won),
            Ok(None) => Ok(AcquireResult::Held),
            Err(e) if e.is_connection_refusal() => {
                Err(backend("cannot reach Redis to take the lock", &e))
            }
            Err(e) => {
                tracing::warn!(error = %e, "lock SET result unknown; checking whether the key holds our token");
                let current = self
                    .read_on_fresh_connection()
                    .await
                    .map_err(|e| backend("cannot check the lock after an ambiguous SET", &e))?;
                if current.as_deref() == Some(token.to_string().as_str()) {
                    Ok(AcquireResult::Won)
                } else {
                    Ok(AcquireResult::Unknown)
                }
            }
        }
    }

    /// GET on a new connection: the shared one may still be waiting for the
    /// lost reply.
    async fn read_on_fresh_connection(&self) -> Result<Option<String>, RedisError> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout));
        let mut conn = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        redis::cmd("GET")
            .arg(&self.key)
            .query_async(&mut conn)
            .await
    }

    pub(super) async fn renew(&self, token: Uuid) -> Result<Renewal, LockError> {
        let mut conn = self.conn.clone();
        let found: i64 = Script::new(RENEW)
            .key(&self.key)
            .arg(token.to_string())
            .arg(millis(self.ttl))
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
            token,
            ttl_left_ms: (ttl >= 0).then_some(ttl),
        }))
    }
}

/// Milliseconds for PX/PEXPIRE, rounded up so a lease is never shorter
/// than asked, and at least 1.
fn millis(d: Duration) -> u64 {
    let ms = d.as_nanos().div_ceil(1_000_000);
    u64::try_from(ms).unwrap_or(u64::MAX).max(1)
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
