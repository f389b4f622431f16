#![allow(unused)]

mod consts;
mod lollipop;
mod of0;
mod parents;
mod rank;
mod relations;
mod trickle;
