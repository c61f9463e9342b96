//! Tests of the calendar over real zone data.
