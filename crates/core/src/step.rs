//! One decision rule's answer: the actions it takes (or none), the operation they
//! belong to, what it waits for or refuses, and why its first action was taken.

use crate::action::Action;
use crate::decision::Operation;

pub(crate) struct Step {
    pub(crate) actions: Vec<Action>,
    pub(crate) operation: Operation,
    pub(crate) waiting_for: Option<String>,
    pub(crate) blocked: bool,
    /// Why the first action was decided, where its name alone does not say.
    pub(crate) because: Option<String>,
}

impl Step {
    pub(crate) fn many(operation: Operation, actions: Vec<Action>) -> Step {
        Step {
            because: None,
            actions,
            operation,
            waiting_for: None,
            blocked: false,
        }
    }
    pub(crate) fn act(operation: Operation, action: Action) -> Step {
        Step {
            because: None,
            actions: vec![action],
            operation,
            waiting_for: None,
            blocked: false,
        }
    }
    pub(crate) fn wait(operation: Operation, why: impl Into<String>) -> Step {
        Step {
            because: None,
            actions: vec![],
            operation,
            waiting_for: Some(why.into()),
            blocked: false,
        }
    }
    /// The step with why its first action was decided (`Decision::because`).
    pub(crate) fn because(self, why: impl Into<String>) -> Step {
        debug_assert!(!self.actions.is_empty(), "a reason is for an action");
        Step {
            because: Some(why.into()),
            ..self
        }
    }
    pub(crate) fn refuse(operation: Operation, why: impl Into<String>) -> Step {
        Step {
            blocked: true,
            ..Step::wait(operation, why)
        }
    }
}
