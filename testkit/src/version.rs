//! A version of Consul or Kubernetes, for what changed across versions: how the harness starts
//! a server (flags, the ACL system, gRPC ports) and what a test expects of it.

use std::fmt;

/// A version `major.minor.patch` (pre-release and metadata suffixes ignored).
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
    /// Parses `1.0.8`, `v1.22.0`, `1.13.2-dev`, `1.16.0+ent` or `v1.34.2-dirty`; `None` for
    /// anything else, so a caller never silently takes the wrong branch.
    pub fn parse(raw: &str) -> Option<Version> {
        let core = raw
            .trim()
            .trim_start_matches('v')
            .split(['-', '+'])
            .next()?;
        let parts: Vec<u32> = core
            .split('.')
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        match parts[..] {
            [major, minor, patch] => Some(Version {
                major,
                minor,
                patch,
            }),
            _ => None,
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
            Some(Version {
                major: 1,
                minor: 13,
                patch: 2
            })
        );
        let parsed = |raw| Version::parse(raw).unwrap_or_else(|| panic!("{raw} parses"));
        assert!(parsed("1.22.0").at_least(1, 7));
        assert!(!parsed("1.0.8").at_least(1, 7));
        assert!(parsed("v1.7.0+ent").at_least(1, 7));
        assert_eq!(Version::parse("1.8"), None);
        assert_eq!(Version::parse("v1.20.2.1"), None);
        assert_eq!(parsed("v1.34.2-dirty").to_string(), "1.34.2");
        assert_eq!(Version::parse("Consul v1.8.7"), None);
    }
}
