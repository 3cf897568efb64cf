//! The server's Consul version, for the cases whose answer changed across versions
//! (`docs/consul.md`, section 13, "Versions").

use std::fmt;

/// A Consul version `major.minor.patch` (pre-release and metadata suffixes ignored).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    /// Major.
    pub major: u32,
    /// Minor.
    pub minor: u32,
    /// Patch.
    pub patch: u32,
}

impl Version {
    /// Parses `1.0.8`, `v1.22.0`, `1.13.2-dev` or `1.16.0+ent`; panics on anything else, so
    /// a case never silently takes the wrong branch.
    pub fn parse(raw: &str) -> Version {
        let core = raw
            .trim()
            .trim_start_matches('v')
            .split(['-', '+'])
            .next()
            .unwrap_or_default();
        let parts: Vec<u32> = core
            .split('.')
            .map(|p| p.parse().unwrap_or_else(|e| panic!("version {raw:?}: {e}")))
            .collect();
        match parts[..] {
            [major, minor, patch] => Version {
                major,
                minor,
                patch,
            },
            _ => panic!("version {raw:?} is not major.minor.patch"),
        }
    }

    /// Whether this version is `major.minor.0` or later.
    pub fn at_least(self, major: u32, minor: u32) -> bool {
        self >= Version {
            major,
            minor,
            patch: 0,
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

#[cfg(test)]
mod tests {
    use super::Version;

    #[test]
    fn parses_and_orders_versions() {
        assert_eq!(
            Version::parse("1.13.2-dev"),
            Version {
                major: 1,
                minor: 13,
                patch: 2
            }
        );
        assert!(Version::parse("1.22.0").at_least(1, 7));
        assert!(!Version::parse("1.0.8").at_least(1, 7));
        assert!(Version::parse("v1.7.0+ent").at_least(1, 7));
    }
}
