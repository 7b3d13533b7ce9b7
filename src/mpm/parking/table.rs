//! The listener's table of parked connections: a slab whose keys carry a generation,
//! so that an epoll event or a timeout entry that outlived its connection (the slot was
//! freed and reused) is recognised as stale instead of touching the wrong connection.

/// A key into the table: slot index and the slot's generation when it was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    index: u32,
    generation: u32,
}

impl Key {
    /// The key as one integer (for epoll's user data).
    pub fn to_u64(self) -> u64 {
        (self.generation as u64) << 32 | self.index as u64
    }

    /// The slot index (stable while the value is stored).
    pub fn index(self) -> u32 {
        self.index
    }

    /// Rebuilds a key from [`Key::to_u64`].
    pub fn from_u64(v: u64) -> Key {
        Key {
            index: v as u32,
            generation: (v >> 32) as u32,
        }
    }
}

/// The slab (see the module doc).
#[derive(Debug)]
pub struct Table<T> {
    slots: Vec<(u32, Option<T>)>,
    free: Vec<u32>,
    len: usize,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Table {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Table<T> {
    /// Stores `v`; its key.
    pub fn insert(&mut self, v: T) -> Key {
        self.len += 1;
        if let Some(index) = self.free.pop() {
            let slot = &mut self.slots[index as usize];
            slot.0 = slot.0.wrapping_add(1);
            slot.1 = Some(v);
            return Key {
                index,
                generation: slot.0,
            };
        }
        self.slots.push((0, Some(v)));
        Key {
            index: (self.slots.len() - 1) as u32,
            generation: 0,
        }
    }

    /// The value under `key`, unless the key is stale.
    pub fn get_mut(&mut self, key: Key) -> Option<&mut T> {
        match self.slots.get_mut(key.index as usize) {
            Some((g, Some(v))) if *g == key.generation => Some(v),
            _ => None,
        }
    }

    /// Takes the value under `key` out, unless the key is stale.
    pub fn remove(&mut self, key: Key) -> Option<T> {
        let slot = self.slots.get_mut(key.index as usize)?;
        if slot.0 != key.generation || slot.1.is_none() {
            return None;
        }
        self.len -= 1;
        self.free.push(key.index);
        slot.1.take()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every key in use.
    pub fn keys(&self) -> Vec<Key> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, (_, v))| v.is_some())
            .map(|(i, (g, _))| Key {
                index: i as u32,
                generation: *g,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reused_slot_makes_old_keys_stale() {
        let mut t = Table::default();
        let a = t.insert("a");
        assert_eq!(t.remove(a), Some("a"));
        let b = t.insert("b");
        assert_ne!(a, b, "same slot, new generation");
        assert_eq!(t.get_mut(a), None);
        assert_eq!(t.remove(a), None);
        assert_eq!(t.get_mut(b).copied(), Some("b"));
        assert_eq!(Key::from_u64(b.to_u64()), b);
        assert_eq!(t.keys(), vec![b]);
    }
}
