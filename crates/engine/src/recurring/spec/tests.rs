//! Tests of spec validation and the stored form.
