//! Fencing tokens: the agent's one memory of the controllers. Each control plane has
//! a high-water mark, the highest fencing token any call for it carried, kept in
//! `<state>/fences/<control plane>` (written atomically and synced before the call
//! acts). A call with a lower token is refused and changes nothing: the controller that
//! sent it has been deposed (its successor's leadership token is higher: etcd's create
//! revisions only grow). The check and the action run under the control plane's lock,
//! so a stale call can never act after a newer one raised the mark.

use crate::{member_of, proto::Fence};
use quorum_core::lease::FenceToken;
use std::collections::HashMap;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The most control planes whose locks are kept (one lock each, made on first use).
pub const MAX_CONTROL_PLANES: usize = 10_000;

#[derive(Debug, thiserror::Error)]
pub enum FenceError {
    #[error("the call carries no fencing token; every call that can change a member's data must")]
    Missing,
    #[error("member {member:?} is not a member of control plane {control_plane:?}, which the fencing token is for")]
    OtherControlPlane {
        member: String,
        control_plane: String,
    },
    #[error("stale fencing token {token} for control plane {control_plane:?}: this agent has seen {highest}; the controller that sent it is no longer the one in charge, so nothing was done")]
    Stale {
        control_plane: String,
        token: FenceToken,
        highest: FenceToken,
    },
    #[error("fencing token of control plane {control_plane:?}: {source}")]
    Io {
        control_plane: String,
        #[source]
        source: io::Error,
    },
    #[error("this agent already tracks {MAX_CONTROL_PLANES} control planes")]
    TooMany,
}

/// The high-water marks of one agent.
#[derive(Debug)]
pub struct Fences {
    dir: PathBuf,
    locks: Mutex<HashMap<String, Arc<Mutex<()>>>>,
}

impl Fences {
    pub fn new(dir: &Path) -> Fences {
        Fences {
            dir: dir.to_path_buf(),
            locks: Mutex::new(HashMap::new()),
        }
    }

    /// The highest token seen for `cp` (`None`: none yet).
    pub fn highest(&self, cp: &str) -> Result<Option<FenceToken>, FenceError> {
        let io_err = |source| FenceError::Io {
            control_plane: cp.to_string(),
            source,
        };
        match fs::read_to_string(self.dir.join(cp)) {
            Ok(text) => text
                .trim()
                .parse()
                .map(|t| Some(FenceToken(t)))
                .map_err(|_| {
                    io_err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("{:?} is not a token", text.trim()),
                    ))
                }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err(e)),
        }
    }

    /// Runs `act` if `fence` admits a call on `member`: the member is the control
    /// plane's and the token is not below the mark (a higher one becomes the mark,
    /// durably, first). Holds the control plane's lock throughout. Blocking.
    pub fn admit<T, E: From<FenceError>>(
        &self,
        fence: Option<&Fence>,
        member: &str,
        act: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, E> {
        let fence = fence.ok_or(FenceError::Missing)?;
        let cp = fence.control_plane.as_str();
        if !crate::valid_member_name(cp) || !member_of(member, cp) {
            return Err(FenceError::OtherControlPlane {
                member: member.to_string(),
                control_plane: cp.to_string(),
            }
            .into());
        }
        let lock = self.lock(cp)?;
        let _held = lock.lock().unwrap_or_else(|p| p.into_inner());
        // The one place the wire's number becomes a token.
        let token = FenceToken(fence.token);
        match self.highest(cp)? {
            Some(highest) if token < highest => {
                return Err(FenceError::Stale {
                    control_plane: cp.to_string(),
                    token,
                    highest,
                }
                .into())
            }
            Some(highest) if token == highest => {}
            _ => self.raise(cp, token)?,
        }
        act()
    }

    fn lock(&self, cp: &str) -> Result<Arc<Mutex<()>>, FenceError> {
        let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(l) = locks.get(cp) {
            return Ok(l.clone());
        }
        if locks.len() >= MAX_CONTROL_PLANES {
            return Err(FenceError::TooMany);
        }
        let l = Arc::new(Mutex::new(()));
        locks.insert(cp.to_string(), l.clone());
        Ok(l)
    }

    fn raise(&self, cp: &str, token: FenceToken) -> Result<(), FenceError> {
        let io_err = |source| FenceError::Io {
            control_plane: cp.to_string(),
            source,
        };
        fs::create_dir_all(&self.dir).map_err(io_err)?;
        let tmp = self.dir.join(format!(".{cp}.tmp"));
        let write = || -> io::Result<()> {
            let mut f = fs::File::create(&tmp)?;
            f.write_all(token.to_string().as_bytes())?;
            f.sync_all()?;
            fs::rename(&tmp, self.dir.join(cp))?;
            fs::File::open(&self.dir)?.sync_all()
        };
        write().map_err(io_err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fence(cp: &str, token: i64) -> Fence {
        Fence {
            control_plane: cp.into(),
            token,
        }
    }

    #[test]
    fn a_lower_token_is_refused_and_does_nothing_after_a_higher_one_acted() {
        let d = tempfile::tempdir().unwrap();
        let f = Fences::new(d.path());
        let ran = |f: &Fences, cp: &str, token: i64| {
            let mut acted = false;
            let r = f.admit(Some(&fence(cp, token)), &format!("{cp}-1"), || {
                acted = true;
                Ok::<_, FenceError>(())
            });
            (r.is_ok(), acted)
        };
        assert_eq!(ran(&f, "prod", 7), (true, true));
        assert_eq!(
            ran(&f, "prod", 7),
            (true, true),
            "the same controller again"
        );
        assert_eq!(ran(&f, "prod", 9), (true, true), "a newer controller");
        assert_eq!(ran(&f, "prod", 7), (false, false), "the deposed one");
        assert_eq!(
            ran(&f, "other", 1),
            (true, true),
            "marks are per control plane"
        );
        // The mark survives a restart of the agent.
        let again = Fences::new(d.path());
        assert_eq!(again.highest("prod").unwrap(), Some(FenceToken(9)));
        assert_eq!(ran(&again, "prod", 8), (false, false));
    }

    #[test]
    fn a_fence_covers_only_its_own_control_planes_members() {
        let d = tempfile::tempdir().unwrap();
        let f = Fences::new(d.path());
        let r = f.admit(Some(&fence("prod", 1)), "staging-1", || {
            Ok::<_, FenceError>(())
        });
        assert!(matches!(r, Err(FenceError::OtherControlPlane { .. })));
        let r = f.admit(None, "prod-1", || Ok::<_, FenceError>(()));
        assert!(matches!(r, Err(FenceError::Missing)));
        let r = f.admit(
            Some(&fence("../x", 1)),
            "../x-1",
            || Ok::<_, FenceError>(()),
        );
        assert!(matches!(r, Err(FenceError::OtherControlPlane { .. })));
    }
}
