//! The frontend's side of a backend that goes away and comes back (a driver domain restarted):
//! which XenbusState the frontend moves to, for each state its backend shows.
//!
//! Xen's `io/xenbus.h` leaves reconnection to the drivers; this follows Linux netfront's
//! `netback_changed` and the xenbus core's resume path:
//!
//! | frontend | backend shows | the frontend |
//! |---|---|---|
//! | Connected | Connected | nothing |
//! | Connected | anything else (Closing, Closed, gone, or already a new backend's InitWait) | **disconnects**: writes `Closing`, takes its grants back ([`crate::netfront::Netfront::disconnect`]), writes `Closed` |
//! | Closed | InitWait | **reconnects**: writes `Initialising`, sets up its rings afresh, publishes them and its features, writes `Connected` |
//! | Closed | anything else | waits |
//! | Initialising (published, said Connected) | Connected | **resumes**: kicks the backend; traffic flows |
//! | Initialising | Closing, Closed, gone | disconnects again (the new backend died during the handshake) |
//!
//! A backend seen only in InitWait while the frontend is Connected is a backend that went away
//! and came back between two looks: the frontend still goes through `Closing` and `Closed`
//! before `Initialising`, so its sequence is always Closing, Closed, Initialising, Connected.
//! The machine is pure (states in, actions out): the guest process carries the actions out
//! (`run.rs`), and the unit tests below drive it as a mock backend would.

use pvnet_hv::store::XenbusState;

/// Where the frontend is in a reconnection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Connected to a live backend.
    Connected,
    /// The backend went away; grants taken back; waiting for a new backend's InitWait.
    Closed,
    /// Rings published to a new backend and `Connected` written; waiting for the backend to
    /// say Connected.
    Initialising,
}

/// What the frontend must do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Write `Closing`, take every grant back, write `Closed`.
    Disconnect,
    /// Write `Initialising`, set the rings up afresh, publish, write `Connected`.
    Reconnect,
    /// The new backend is connected: repost and kick it.
    Resume,
}

/// The frontend's reconnection state machine (see the module docs).
#[derive(Clone, Debug)]
pub struct Reconnector {
    phase: Phase,
    /// Times the backend went away.
    pub disconnects: u64,
    /// Times a new backend was connected.
    pub reconnects: u64,
}

impl Default for Reconnector {
    fn default() -> Self {
        Reconnector::new()
    }
}

impl Reconnector {
    /// A frontend connected to its first backend.
    pub fn new() -> Reconnector {
        Reconnector {
            phase: Phase::Connected,
            disconnects: 0,
            reconnects: 0,
        }
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The next action for a backend in state `backend` (None: its state node is gone or
    /// unreadable), or None when there is nothing (more) to do. The caller carries the action
    /// out and asks again with the same state until it gets None: a frontend that finds a new
    /// backend in InitWait while still connected disconnects, then reconnects.
    pub fn step(&mut self, backend: Option<XenbusState>) -> Option<Action> {
        use XenbusState as S;
        let gone = matches!(backend, None | Some(S::Closing | S::Closed | S::Unknown));
        match self.phase {
            Phase::Connected if backend == Some(S::Connected) => None,
            Phase::Connected => {
                self.phase = Phase::Closed;
                self.disconnects += 1;
                Some(Action::Disconnect)
            }
            Phase::Closed if backend == Some(S::InitWait) => {
                self.phase = Phase::Initialising;
                Some(Action::Reconnect)
            }
            Phase::Closed => None,
            Phase::Initialising if backend == Some(S::Connected) => {
                self.phase = Phase::Connected;
                self.reconnects += 1;
                Some(Action::Resume)
            }
            Phase::Initialising if gone => {
                self.phase = Phase::Closed;
                self.disconnects += 1;
                Some(Action::Disconnect)
            }
            Phase::Initialising => None,
        }
    }

    /// Runs [`Reconnector::step`] until it has nothing more to do; returns the actions in order.
    pub fn steps(&mut self, backend: Option<XenbusState>) -> Vec<Action> {
        let mut out = Vec::new();
        while let Some(a) = self.step(backend) {
            out.push(a);
            if out.len() > 3 {
                break; // unreachable: every state reaches a fixed point within two steps
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use XenbusState as S;

    /// The frontend's own states, as the guest process writes them for each action.
    fn written(actions: &[Action]) -> Vec<S> {
        actions
            .iter()
            .flat_map(|a| match a {
                Action::Disconnect => vec![S::Closing, S::Closed],
                Action::Reconnect => vec![S::Initialising, S::Connected],
                Action::Resume => vec![],
            })
            .collect()
    }

    #[test]
    fn a_connected_backend_asks_for_nothing() {
        let mut m = Reconnector::new();
        assert_eq!(m.steps(Some(S::Connected)), vec![]);
        assert_eq!(m.phase(), Phase::Connected);
        assert_eq!((m.disconnects, m.reconnects), (0, 0));
    }

    #[test]
    fn a_restart_seen_step_by_step_goes_closing_closed_initialising_connected() {
        // A mock backend: Closing, Closed, its directory gone, then a new backend's InitWait
        // and Connected.
        let mut m = Reconnector::new();
        let mut acts = Vec::new();
        for be in [
            Some(S::Closing),
            Some(S::Closed),
            None,
            Some(S::InitWait),
            Some(S::Connected),
        ] {
            acts.extend(m.steps(be));
        }
        assert_eq!(
            acts,
            vec![Action::Disconnect, Action::Reconnect, Action::Resume]
        );
        assert_eq!(
            written(&acts),
            vec![S::Closing, S::Closed, S::Initialising, S::Connected]
        );
        assert_eq!(m.phase(), Phase::Connected);
        assert_eq!((m.disconnects, m.reconnects), (1, 1));
    }

    #[test]
    fn a_restart_seen_only_as_initwait_still_closes_first() {
        let mut m = Reconnector::new();
        let acts = m.steps(Some(S::InitWait));
        assert_eq!(acts, vec![Action::Disconnect, Action::Reconnect]);
        assert_eq!(
            written(&acts),
            vec![S::Closing, S::Closed, S::Initialising, S::Connected]
        );
        assert_eq!(m.phase(), Phase::Initialising);
        assert_eq!(m.steps(Some(S::Connected)), vec![Action::Resume]);
    }

    #[test]
    fn closed_waits_for_a_new_backend() {
        let mut m = Reconnector::new();
        assert_eq!(m.steps(Some(S::Closed)), vec![Action::Disconnect]);
        for be in [Some(S::Closed), None, Some(S::Closing), Some(S::Connected)] {
            assert_eq!(m.steps(be), vec![], "{be:?}");
            assert_eq!(m.phase(), Phase::Closed);
        }
    }

    #[test]
    fn a_backend_that_dies_during_the_handshake_is_closed_again() {
        let mut m = Reconnector::new();
        m.steps(Some(S::Closed));
        assert_eq!(m.steps(Some(S::InitWait)), vec![Action::Reconnect]);
        // Still InitWait: the backend has not read our keys yet.
        assert_eq!(m.steps(Some(S::InitWait)), vec![]);
        assert_eq!(m.steps(Some(S::Closing)), vec![Action::Disconnect]);
        assert_eq!(m.phase(), Phase::Closed);
        assert_eq!(m.steps(Some(S::InitWait)), vec![Action::Reconnect]);
        assert_eq!(m.steps(Some(S::Connected)), vec![Action::Resume]);
        assert_eq!((m.disconnects, m.reconnects), (2, 1));
    }

    #[test]
    fn two_restarts_count_twice() {
        let mut m = Reconnector::new();
        for _ in 0..2 {
            m.steps(Some(S::Closing));
            m.steps(Some(S::InitWait));
            m.steps(Some(S::Connected));
        }
        assert_eq!((m.disconnects, m.reconnects), (2, 2));
        assert_eq!(m.phase(), Phase::Connected);
    }
}
