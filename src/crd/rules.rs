//! Every rule of the `LeaderElection` schema in one place: the regular expressions of the
//! schema's `pattern`s, the size limits, the CEL rules (`x-kubernetes-validations`) and the
//! messages users see. The schema (`spec.rs`), the Rust validation (`validate.rs`) and the
//! tests all read them from here, so a rule and its message cannot drift apart.
//!
//! Regular expressions are RE2 (no lookahead, no backreferences) and contain no backslash
//! (a literal dot is written `[.]`), so the same text is valid in an OpenAPI `pattern` and
//! inside a single-quoted CEL string.

use kube::core::Rule;

/// Defines a `macro_rules!` literal and a `&str` constant for a regular expression, so the
/// literal can also be spliced into CEL rule text with `concat!`.
macro_rules! regex {
    ($(#[$doc:meta])* $name:ident, $macro:ident, $re:literal) => {
        macro_rules! $macro {
            () => {
                $re
            };
        }
        $(#[$doc])*
        pub const $name: &str = $re;
    };
}

regex!(
    /// A label key (Kubernetes "qualified name"): an optional DNS-subdomain prefix and `/`,
    /// then a name of 1 to 63 characters (`A-Z a-z 0-9 - _ .`) starting and ending with a
    /// letter or digit. The prefix length (at most 253) is [`LABEL_KEY_PREFIX_PATTERN`].
    LABEL_KEY_PATTERN,
    label_key_re,
    "^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
);

regex!(
    /// The prefix of a label key, if any, has at most 253 characters.
    LABEL_KEY_PREFIX_PATTERN,
    label_key_prefix_re,
    "^([^/]{1,253}/)?[^/]*$"
);

regex!(
    /// A non-empty label value: 1 to 63 characters (`A-Z a-z 0-9 - _ .`) starting and
    /// ending with a letter or digit.
    LABEL_VALUE_PATTERN,
    label_value_re,
    "^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
);

/// A label value as selectors may use it: like [`LABEL_VALUE_PATTERN`], or empty.
pub const SELECTOR_VALUE_PATTERN: &str = "^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$";

regex!(
    /// A Go duration as this CRD accepts it: `0`, or one or more `<number><unit>` with a
    /// decimal number (digits, optionally `.` and more digits) and a unit `h`, `m`, `s`,
    /// `ms`, `us` or `ns`. No sign, no spaces.
    DURATION_PATTERN,
    duration_re,
    "^(0|([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+)$"
);

/// A Consul KV key: segments of `A-Z a-z 0-9 _ , - .` separated by single `/`, without `..`,
/// without a segment that is just `.`, and without a leading or trailing `/`.
pub const CONSUL_KEY_PATTERN: &str = "^[.]?([-A-Za-z0-9_,][.]?)+(/[.]?([-A-Za-z0-9_,][.]?)+)*$";

regex!(
    /// The characters a Consul key may contain, plus the space (which has its own rule).
    CONSUL_KEY_CHARACTERS_PATTERN,
    consul_key_characters_re,
    "^[-A-Za-z0-9_.,/ ]*$"
);

/// A Consul HTTP address: `host[:port]`, optionally with `http://` or `https://`.
pub const CONSUL_ADDRESS_PATTERN: &str = "^(https?://)?[^/?#@ ]+/?$";

/// A Consul datacenter name.
pub const DATACENTER_PATTERN: &str = "^[A-Za-z0-9_-]+$";

/// A Consul Enterprise namespace or admin partition name (a DNS label, either case).
pub const TENANCY_PATTERN: &str = "^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?$";

/// A Secret name (DNS subdomain).
pub const SECRET_NAME_PATTERN: &str =
    "^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// A key of a Secret's data.
pub const SECRET_KEY_PATTERN: &str = "^[-._A-Za-z0-9]+$";

/// Longest label key: a 253-character prefix, `/` and a 63-character name.
pub const LABEL_KEY_MAX_LENGTH: u32 = 317;
/// Longest label value.
pub const LABEL_VALUE_MAX_LENGTH: u32 = 63;
/// Longest Consul key.
pub const CONSUL_KEY_MAX_LENGTH: u32 = 512;
/// Longest duration string.
pub const DURATION_MAX_LENGTH: u32 = 32;
/// Longest Consul address.
pub const CONSUL_ADDRESS_MAX_LENGTH: u32 = 512;
/// Longest datacenter name.
pub const DATACENTER_MAX_LENGTH: u32 = 64;
/// Longest Consul Enterprise namespace or admin partition name.
pub const TENANCY_MAX_LENGTH: u32 = 63;
/// Longest Secret name.
pub const SECRET_NAME_MAX_LENGTH: u32 = 253;
/// Longest key of a Secret's data.
pub const SECRET_KEY_MAX_LENGTH: u32 = 253;
/// Most entries in `selector.matchLabels`.
pub const MATCH_LABELS_MAX: u32 = 64;
/// Most entries in `selector.matchExpressions`.
pub const MATCH_EXPRESSIONS_MAX: u32 = 32;
/// Most values of one selector requirement.
pub const REQUIREMENT_VALUES_MAX: u32 = 64;

/// Bounds of `session.ttl`, in seconds (Consul's limits).
pub const TTL_SECONDS: (u64, u64) = (10, 86_400);
/// Largest `session.lockDelay`, in seconds (Consul's limit).
pub const LOCK_DELAY_MAX_SECONDS: u64 = 60;
/// Largest `failover.delay`, in seconds.
pub const FAILOVER_DELAY_MAX_SECONDS: u64 = 86_400;
/// `switchover.drainSeconds` upper bound.
pub const SWITCHOVER_DRAIN_MAX_SECONDS: u32 = 300;

/// A CEL validation rule of the CRD with the message users see when it fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CelRule {
    /// The CEL expression; `self` is the field (or object) the rule is attached to.
    pub rule: &'static str,
    /// What the API server answers when the rule is false.
    pub message: &'static str,
}

/// Without `reason` (its default, `FieldValueInvalid`, is what every rule here means):
/// Kubernetes before 1.28 does not know the field, and a server-side apply of a CRD carrying
/// it fails there.
impl From<CelRule> for Rule {
    fn from(rule: CelRule) -> Self {
        Rule::new(rule.rule).message(rule.message)
    }
}

/// `selector`: something must be selected.
pub const SELECTOR_NOT_EMPTY: CelRule = CelRule {
    rule: "(has(self.matchLabels) && size(self.matchLabels) > 0) || (has(self.matchExpressions) && size(self.matchExpressions) > 0)",
    message: "must not be empty: give matchLabels or matchExpressions (an empty selector would select every pod in the namespace)",
};

/// `selector.matchExpressions[*]`: `In`/`NotIn` need values, `Exists`/`DoesNotExist` take none.
pub const REQUIREMENT_VALUES: CelRule = CelRule {
    rule: "self.operator in ['In', 'NotIn'] ? (has(self.values) && size(self.values) > 0) : (!has(self.values) || size(self.values) == 0)",
    message: "operators In and NotIn need at least one value; Exists and DoesNotExist take no values",
};

/// Any label key field (`labels.key`, `selector.matchExpressions[*].key`).
pub const LABEL_KEY: CelRule = CelRule {
    rule: concat!(
        "self.matches('",
        label_key_re!(),
        "') && self.matches('",
        label_key_prefix_re!(),
        "')"
    ),
    message: "must be a valid label key: an optional DNS subdomain prefix (at most 253 characters) and '/', then a name of 1 to 63 letters, digits, '-', '_' or '.' that starts and ends with a letter or digit, such as elector.dev/role",
};

/// `labels.leader` and `labels.follower`.
pub const LABEL_VALUE: CelRule = CelRule {
    rule: concat!("self.matches('", label_value_re!(), "')"),
    message: "must be a valid label value: 1 to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
};

/// `labels`: the two roles must be told apart.
pub const LEADER_FOLLOWER_DIFFER: CelRule = CelRule {
    rule: "self.leader != self.follower",
    message: "leader and follower must be different values, otherwise the leader cannot be told apart from its followers",
};

/// `spec`: the operator's label must not be part of the selector.
pub const LABEL_KEY_NOT_SELECTED: CelRule = CelRule {
    rule: "(!has(self.selector.matchLabels) || !(self.labels.key in self.selector.matchLabels)) && (!has(self.selector.matchExpressions) || self.selector.matchExpressions.all(e, e.key != self.labels.key))",
    message: "labels.key must not be used by the selector: the operator writes that label, which would change which pods are selected",
};

/// `key`: not empty (leave the field out for the default).
pub const KEY_NOT_EMPTY: CelRule = CelRule {
    rule: "size(self) > 0",
    message: "must not be empty; leave key out to use the default elector/<namespace>/<name>/leader",
};

/// `key`: no leading slash.
pub const KEY_NO_LEADING_SLASH: CelRule = CelRule {
    rule: "!self.startsWith('/')",
    message: "must not start with '/': Consul KV keys are relative, such as elector/shop/web/leader",
};

/// `key`: no trailing slash.
pub const KEY_NO_TRAILING_SLASH: CelRule = CelRule {
    rule: "!self.endsWith('/')",
    message: "must not end with '/': that names a folder, not a key",
};

/// `key`: no empty segment.
pub const KEY_NO_EMPTY_SEGMENT: CelRule = CelRule {
    rule: "!self.contains('//')",
    message: "must not contain '//' (an empty path segment)",
};

/// `key`: no `..`.
pub const KEY_NO_DOT_DOT: CelRule = CelRule {
    rule: "!self.contains('..')",
    message: "must not contain '..'",
};

/// `key`: no `.` segment. Consul's HTTP server cleans the request path (`a/./b` is `a/b`), so
/// such a key could never be addressed as written; the operator's client refuses it.
pub const KEY_NO_DOT_SEGMENT: CelRule = CelRule {
    rule: "!self.matches('(^|/)[.](/|$)')",
    message: "must not have '.' as a path segment (such as a/./b): Consul's HTTP server removes it from the request path, so the key could not be used as written",
};

/// `key`: no space.
pub const KEY_NO_SPACE: CelRule = CelRule {
    rule: "!self.contains(' ')",
    message: "must not contain spaces",
};

/// `key`: only the allowed characters (the space has its own rule).
pub const KEY_CHARACTERS: CelRule = CelRule {
    rule: concat!("self.matches('", consul_key_characters_re!(), "')"),
    message: "may contain only letters, digits and the characters '-', '_', '.', ',' and '/'",
};

/// Every duration field.
pub const DURATION_SYNTAX: CelRule = CelRule {
    rule: concat!("self.matches('", duration_re!(), "')"),
    message: "must be a duration such as 15s, 1m30s or 500ms: numbers with the units h, m, s, ms, us or ns, without sign or spaces",
};

/// `session.ttl`: Consul accepts 10s to 24h.
pub const TTL_RANGE: CelRule = CelRule {
    rule: concat!(
        "!self.matches('",
        duration_re!(),
        "') || (duration(self) >= duration('10s') && duration(self) <= duration('86400s'))"
    ),
    message: "must be between 10s and 24h (86400s), Consul's limits for a session TTL",
};

/// `session.lockDelay`: Consul accepts 0s to 60s.
pub const LOCK_DELAY_RANGE: CelRule = CelRule {
    rule: concat!(
        "!self.matches('",
        duration_re!(),
        "') || duration(self) <= duration('60s')"
    ),
    message: "must be at most 60s, Consul's limit for a lock-delay",
};

/// `failover.delay`: at most a day.
pub const FAILOVER_DELAY_RANGE: CelRule = CelRule {
    rule: concat!(
        "!self.matches('",
        duration_re!(),
        "') || duration(self) <= duration('24h')"
    ),
    message: "must be at most 24h",
};

/// Every CEL rule of the CRD (tests check each one is attached and exercised).
pub const ALL_CEL_RULES: &[CelRule] = &[
    SELECTOR_NOT_EMPTY,
    REQUIREMENT_VALUES,
    LABEL_KEY,
    LABEL_VALUE,
    LEADER_FOLLOWER_DIFFER,
    LABEL_KEY_NOT_SELECTED,
    KEY_NOT_EMPTY,
    KEY_NO_LEADING_SLASH,
    KEY_NO_TRAILING_SLASH,
    KEY_NO_EMPTY_SEGMENT,
    KEY_NO_DOT_DOT,
    KEY_NO_DOT_SEGMENT,
    KEY_NO_SPACE,
    KEY_CHARACTERS,
    DURATION_SYNTAX,
    TTL_RANGE,
    LOCK_DELAY_RANGE,
    FAILOVER_DELAY_RANGE,
];

// Messages of the rules the schema enforces without CEL (enums, patterns, sizes); the Rust
// validation reports them in the same words on clusters that skip CEL or for objects that
// never went through the API server.

/// `selector.matchLabels` / `matchExpressions` values.
pub const SELECTOR_VALUE_MESSAGE: &str = "must be a valid label value: at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit (or empty)";
/// `consul.address`.
pub const CONSUL_ADDRESS_MESSAGE: &str =
    "must be host:port, http://host:port or https://host:port (at most 512 characters)";
/// `consul.datacenter`.
pub const DATACENTER_MESSAGE: &str = "must be 1 to 64 letters, digits, '-' or '_', such as dc1";
/// `consul.namespace`, `consul.partition`.
pub const TENANCY_MESSAGE: &str = "must be 1 to 63 letters, digits or '-', starting and ending with a letter or digit, such as team-a";
/// `consul.tokenSecretRef.name`.
pub const SECRET_NAME_MESSAGE: &str = "must be a Secret name: at most 253 lowercase letters, digits, '-' or '.', starting and ending with a letter or digit";
/// `consul.tokenSecretRef.key`.
pub const SECRET_KEY_MESSAGE: &str =
    "must be a key of the Secret's data: at most 253 letters, digits, '-', '_' or '.'";
