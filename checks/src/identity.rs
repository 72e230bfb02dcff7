//! One shape for a check's identity: the [`check!`] macro that the fleet
//! and job checks declare themselves with.

/// A unit struct `$ty` implementing [`Check`](crate::Check): its id, title,
/// profile, explain text, a time limit where one is given, and `run` as the
/// given function of the check and its [`Context`](crate::Context).
macro_rules! check {
    (
        $ty:ident,
        $id:literal,
        $title:literal,
        $explain:expr,
        profile: $profile:expr,
        $(timeout: $timeout:expr,)?
        run: $run:expr $(,)?
    ) => {
        pub struct $ty;

        impl $crate::Check for $ty {
            fn id(&self) -> &'static str {
                $id
            }
            fn title(&self) -> &'static str {
                $title
            }
            fn profile(&self) -> $crate::Profile {
                $profile
            }
            $(
                fn timeout(&self) -> std::time::Duration {
                    $timeout
                }
            )?
            fn explain(&self) -> &'static str {
                $explain
            }
            fn run(&self, ctx: &$crate::Context) -> $crate::Outcome {
                let run: fn(&dyn $crate::Check, &$crate::Context) -> $crate::Outcome = $run;
                run(self, ctx)
            }
        }
    };
}
pub(crate) use check;
