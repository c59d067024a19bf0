//! A request's extensions: values of any type, one per type, that a layer puts on the
//! request and a handler (or a later layer) reads: the authenticated user, a tenant, a
//! timer. `req.extensions_mut().insert(User { .. })`, then
//! `req.extensions().get::<User>()`.
//!
//! A request that carries none allocates nothing: the map is made by the first insert,
//! and emptied (not freed) for the connection's next request.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// A typed map, one value per type (see the module's header).
#[derive(Clone, Default)]
pub struct Extensions {
    // Boxed: a request without extensions (most) carries one pointer, not a map.
    #[allow(clippy::box_collection)]
    map: Option<Box<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>>,
}

impl Extensions {
    /// Put `value` on the request, replacing (and returning) one of the same type.
    pub fn insert<T: Send + Sync + 'static>(&mut self, value: T) -> Option<Arc<T>> {
        self.map
            .get_or_insert_with(Default::default)
            .insert(TypeId::of::<T>(), Arc::new(value))
            .and_then(|old| old.downcast().ok())
    }

    /// The value of type `T`, if a layer put one.
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.map
            .as_ref()?
            .get(&TypeId::of::<T>())
            .and_then(|v| v.downcast_ref())
    }

    /// Take the value of type `T` off the request.
    pub fn remove<T: Send + Sync + 'static>(&mut self) -> Option<Arc<T>> {
        self.map
            .as_mut()?
            .remove(&TypeId::of::<T>())
            .and_then(|v| v.downcast().ok())
    }

    /// How many values there are.
    pub fn len(&self) -> usize {
        self.map.as_ref().map_or(0, |m| m.len())
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Remove every value, keeping the map's memory for the next request.
    pub(crate) fn clear(&mut self) {
        if let Some(map) = &mut self.map {
            map.clear();
        }
    }
}

impl fmt::Debug for Extensions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Extensions({} values)", self.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct User(&'static str);

    #[test]
    fn a_value_is_found_by_its_type_and_replaced_by_the_next() {
        let mut ext = Extensions::default();
        assert_eq!(ext.get::<User>(), None);
        assert!(ext.insert(User("ada")).is_none());
        ext.insert(7u32);
        assert_eq!(ext.get::<User>(), Some(&User("ada")));
        assert_eq!(ext.get::<u32>(), Some(&7));
        assert_eq!(ext.insert(User("bob")).as_deref(), Some(&User("ada")));
        assert_eq!(ext.remove::<u32>().as_deref(), Some(&7));
        assert_eq!(ext.len(), 1);
        ext.clear();
        assert!(ext.is_empty() && ext.get::<User>().is_none());
    }
}
