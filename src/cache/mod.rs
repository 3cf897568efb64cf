//! What the operator knows of the cluster between two reads: the watch streams of several
//! namespaces merged into one store ([`scoped_stream`]), the indexes over the cached pods and
//! elections ([`index`]), the label keys the pods' controllers select on
//! ([`owner_selectors`]), the elections' validated specs ([`validated`]), and what this
//! process wrote that the caches may not show yet ([`written`]), all of them together in
//! [`caches::Caches`], the reads of one election's world through them ([`views`]), and the
//! wait of a replica that became active until they are as new as a fresh list ([`fresh`]).
//! Nothing here decides or writes to the cluster; the controller reads it.

pub mod caches;
pub mod fresh;
pub mod index;
pub mod keys;
pub mod owner_selectors;
pub mod scoped_stream;
pub mod validated;
pub mod views;
pub mod written;
