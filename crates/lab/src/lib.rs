//! The lab: experiment plans, runner, aggregation and the report.
