//! The ids of recently seen commands, so a command the hub delivers twice (after a reconnect, say)
//! runs once and the second delivery gets the first result.

use std::collections::{HashMap, VecDeque};

use banhub_proto::v1::CommandResult;

/// How many command ids are remembered by default.
pub const DEFAULT_CAPACITY: usize = 1024;

/// What the cache knows about a command id.
#[derive(Debug, Clone, PartialEq)]
pub enum Seen<'a> {
    /// Never seen (or forgotten long ago): run it.
    New,
    /// Still running: its result will be sent when it is done.
    Running,
    /// Done: send this result again.
    Done(&'a CommandResult),
}

#[derive(Debug)]
enum Entry {
    Running,
    Done(Box<CommandResult>),
}

/// A bounded map from command id to state; the oldest id is forgotten first.
#[derive(Debug)]
pub struct RecentCommands {
    capacity: usize,
    order: VecDeque<String>,
    entries: HashMap<String, Entry>,
}

impl RecentCommands {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            order: VecDeque::new(),
            entries: HashMap::new(),
        }
    }

    pub fn seen(&self, id: &str) -> Seen<'_> {
        match self.entries.get(id) {
            None => Seen::New,
            Some(Entry::Running) => Seen::Running,
            Some(Entry::Done(result)) => Seen::Done(result),
        }
    }

    /// Records that the command `id` started.
    pub fn start(&mut self, id: &str) {
        self.insert(id, Entry::Running);
    }

    /// Records the result of a command (also one that was refused without running).
    pub fn finish(&mut self, result: &CommandResult) {
        self.insert(&result.id, Entry::Done(Box::new(result.clone())));
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn insert(&mut self, id: &str, entry: Entry) {
        if self.entries.insert(id.to_owned(), entry).is_none() {
            self.order.push_back(id.to_owned());
        }
        while self.order.len() > self.capacity {
            if let Some(oldest) = self.order.pop_front() {
                self.entries.remove(&oldest);
            }
        }
    }
}

impl Default for RecentCommands {
    fn default() -> Self {
        Self::new(DEFAULT_CAPACITY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(id: &str) -> CommandResult {
        CommandResult {
            id: id.to_owned(),
            outcome: None,
        }
    }

    #[test]
    fn tracks_running_then_done() {
        let mut recent = RecentCommands::new(4);
        assert_eq!(recent.seen("a"), Seen::New);
        recent.start("a");
        assert_eq!(recent.seen("a"), Seen::Running);
        recent.finish(&result("a"));
        assert_eq!(recent.seen("a"), Seen::Done(&result("a")));
        assert_eq!(recent.len(), 1);
    }

    #[test]
    fn forgets_the_oldest_beyond_capacity() {
        let mut recent = RecentCommands::new(3);
        for id in ["a", "b", "c", "d"] {
            recent.start(id);
            recent.finish(&result(id));
        }
        assert_eq!(recent.len(), 3);
        assert_eq!(recent.seen("a"), Seen::New);
        assert!(matches!(recent.seen("b"), Seen::Done(_)));
        assert!(matches!(recent.seen("d"), Seen::Done(_)));
    }

    #[test]
    fn finishing_keeps_the_original_position() {
        // Finishing must not move an id to the back, or a slow command could outlive newer ones
        // while its redelivery window is what matters.
        let mut recent = RecentCommands::new(2);
        recent.start("a");
        recent.start("b");
        recent.finish(&result("a"));
        recent.start("c");
        assert_eq!(recent.seen("a"), Seen::New);
        assert_eq!(recent.seen("b"), Seen::Running);
        assert_eq!(recent.seen("c"), Seen::Running);
    }

    #[test]
    fn a_result_for_a_forgotten_id_is_remembered_again() {
        let mut recent = RecentCommands::new(1);
        recent.start("a");
        recent.start("b");
        recent.finish(&result("a"));
        assert!(matches!(recent.seen("a"), Seen::Done(_)));
        assert_eq!(recent.seen("b"), Seen::New);
    }
}
