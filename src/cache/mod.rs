//! What the operator knows of the cluster between two reads: the watch streams of several
//! namespaces merged into one store ([`scoped_stream`]), the indexes over the cached pods and
//! elections ([`index`]), and the label keys the pods' controllers select on
//! ([`owner_selectors`]). Nothing here decides or writes; the controller reads it.

pub mod index;
pub mod owner_selectors;
pub mod scoped_stream;
