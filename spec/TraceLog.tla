------------------------------ MODULE TraceLog ------------------------------
(***************************************************************************)
(* The logged runs TraceDataLoader checks. This file is a placeholder that *)
(* keeps the trace spec parseable on its own: `loaderspec trace-check`     *)
(* writes a module of this name, with the runs as a sequence literal, into *)
(* a temporary folder beside copies of the specs, and TLC reads that one.  *)
(* A zero-arity definition (not a CONSTANT substituted in the .cfg) so TLC *)
(* evaluates the literal once, not on every access.                        *)
(***************************************************************************)
EXTENDS Integers, TLC

\* A sequence of runs; each run a sequence of records (architecture.md, "Trace records").
TraceLogs == << >>
\* Per run, the state its iterator began from (the Config header's start, docs/checkpoint.md).
TraceStarts == << >>
=============================================================================
