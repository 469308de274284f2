//! The sentence encoder's recall through the real product's front ends (CLI
//! processes, MCP, console): paraphrases found after an add, a bulk import and
//! a catch-up; long memories; the encoder off and on; edits and deletes; and
//! the gate before ranking for every candidate source in every mode. Owns no
//! product code; must never sleep as synchronisation or assert on timings.
