//! One copy of each bot user object for all the sessions that carry it.
//!
//! Every session keeps its bot's user object (`Identity::user_json`, for
//! member chunks): ~230 B of JSON, the same for every session of an
//! application. Built once per Identify, it cost each idle session a
//! 256-byte allocation (issue 30). The sidecar now hands out a shared copy
//! of the text it built, found by content, so a renamed bot simply gets a
//! new entry and no entry is ever stale.
//!
//! Bounds: at most `CAP` distinct texts; when full the set is emptied (the
//! sessions keep their copies; later ones share again from there).

use std::collections::HashSet;
use std::sync::Arc;

/// Distinct bot user objects held (applications identifying on this node).
const CAP: usize = 4096;

#[derive(Default)]
pub struct Interned {
    set: HashSet<Arc<str>>,
}

impl Interned {
    /// The shared copy of `text` (made from it if there is none yet).
    pub fn get(&mut self, text: String) -> Arc<str> {
        if let Some(a) = self.set.get(text.as_str()) {
            return a.clone();
        }
        if self.set.len() >= CAP {
            self.set.clear();
        }
        let a: Arc<str> = text.into();
        self.set.insert(a.clone());
        a
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.set.len()
    }
}

#[cfg(test)]
mod tests {
    use crate::link::interned::{Interned, CAP};

    #[test]
    fn the_same_text_is_one_copy_and_the_set_stays_bounded() {
        let mut i = Interned::default();
        let a = i.get("{\"id\":\"1\"}".to_string());
        let b = i.get("{\"id\":\"1\"}".to_string());
        assert!(std::sync::Arc::ptr_eq(&a, &b));
        let c = i.get("{\"id\":\"2\"}".to_string());
        assert!(!std::sync::Arc::ptr_eq(&a, &c));
        for n in 0..CAP + 10 {
            i.get(format!("{{\"id\":\"{n}\"}}"));
        }
        assert!(i.len() <= CAP);
        // A copy handed out before the set was emptied is still whole.
        assert_eq!(&*a, "{\"id\":\"1\"}");
    }
}
