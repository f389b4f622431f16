//! `enum_with_unknown!`: a code enum whose unlisted values round-trip.
//!
//! Modelled on smoltcp's macro of the same name (`src/macros.rs`): every
//! listed variant maps to its code, and any other code becomes
//! `Unknown(code)`, so a parser never loses an opcode it does not know and an
//! emitter writes back exactly what it read.

macro_rules! enum_with_unknown {
    (
        $( #[$enum_attr:meta] )*
        pub enum $name:ident($ty:ty) {
            $(
                $( #[$variant_attr:meta] )*
                $variant:ident = $value:expr
            ),+ $(,)?
        }
    ) => {
        $( #[$enum_attr] )*
        #[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Clone, Copy, Hash)]
        pub enum $name {
            $(
                $( #[$variant_attr] )*
                $variant
            ),*,
            /// A code this implementation does not know; kept verbatim.
            Unknown($ty),
        }

        impl ::core::convert::From<$ty> for $name {
            fn from(value: $ty) -> Self {
                match value {
                    $( value if value == $value => $name::$variant ),*,
                    other => $name::Unknown(other),
                }
            }
        }

        impl ::core::convert::From<$name> for $ty {
            fn from(value: $name) -> Self {
                match value {
                    $( $name::$variant => $value ),*,
                    $name::Unknown(other) => other,
                }
            }
        }
    };
}

pub(crate) use enum_with_unknown;
