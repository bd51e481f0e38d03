//! `keyword_enum!`: an enum of keywords as users type them (flags, TOML values, config
//! items), with `keyword`, `allowed`, `Display` and a case-insensitive `FromStr`: the
//! keyword sets of `train` (formats, recompute, engines) and of `cluster` (the host CPU).

macro_rules! keyword_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $var:ident => $kw:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ::serde::Serialize, ::serde::Deserialize)]
        pub enum $name { $($(#[$vm])* #[serde(rename = $kw)] $var),+ }
        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$var),+];
            pub fn keyword(self) -> &'static str { match self { $($name::$var => $kw),+ } }
            pub fn allowed() -> String { [$($kw),+].join("|") }
        }
        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result { f.write_str(self.keyword()) }
        }
        impl ::std::str::FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> ::std::result::Result<Self, String> {
                match s.to_ascii_lowercase().as_str() {
                    $($kw => Ok($name::$var),)+
                    _ => Err(format!("`{s}` is not one of {}", $name::allowed())),
                }
            }
        }
    };
}
