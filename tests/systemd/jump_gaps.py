#!/usr/bin/env python3
"""Reads an `nft -a monitor` log and names every committed generation in which no
POSTROUTING rule of table ip nat jumped to IP-MASQ-AGENT: a moment when new flows leave
unmasqueraded. Events arrive per object, and a transaction's events end with its
`# new generation N by process P (NAME)` line, so the state is judged at those lines only
(an atomic rewrite that deletes and re-adds the jump in one commit is no gap).

  jump_gaps.py MONITOR_LOG INITIAL_LISTING [WINDOW]

INITIAL_LISTING is `nft -a list chain ip nat POSTROUTING`, taken once the monitor was
listening. The window to judge lies between the generations that add the tables
`inet ipmasq_WINDOW_start` and `inet ipmasq_WINDOW_end` (WINDOW is `window` unless given);
what follows the end is reported apart (scripts/systemd-test stops the unit or erases the
package there, to prove a gap is seen). Prints JSON:
{"generations": N, "gaps": [...], "after": [...]}.
"""

import json
import re
import sys

JUMP = re.compile(r"jump IP-MASQ-AGENT\b.*# handle (\d+)")
DELETE_RULE = re.compile(r"^delete rule ip nat POSTROUTING handle (\d+)")
GENERATION = re.compile(r"^# new generation (\d+) by process \d+ \((.*)\)")


def main(log_path, listing_path, window="window"):
    jumps = {m.group(1) for m in map(JUMP.search, open(listing_path)) if m}
    chain_exists = True
    phase = "before"
    generations, gaps, after = 0, [], []
    for line in open(log_path):
        line = line.rstrip("\n")
        if line.startswith(f"add table inet ipmasq_{window}_start "):
            phase = "window"
        elif line.startswith(f"add table inet ipmasq_{window}_end "):
            phase = "after"
        elif line.startswith("add rule ip nat POSTROUTING"):
            m = JUMP.search(line)
            if m:
                jumps.add(m.group(1))
        elif DELETE_RULE.match(line):
            jumps.discard(DELETE_RULE.match(line).group(1))
        elif re.match(r"^(delete|flush) (table ip nat|chain ip nat POSTROUTING)\b", line):
            jumps.clear()
        elif line.startswith("delete chain ip nat IP-MASQ-AGENT"):
            chain_exists = False
        elif re.match(r"^(add|create) chain ip nat IP-MASQ-AGENT\b", line):
            chain_exists = True
        elif GENERATION.match(line):
            number, process = GENERATION.match(line).groups()
            missing = not jumps or not chain_exists
            if phase == "window":
                generations += 1
                if missing:
                    gaps.append({"generation": int(number), "process": process})
            elif phase == "after" and missing:
                after.append({"generation": int(number), "process": process})
    print(json.dumps({"generations": generations, "gaps": gaps, "after": after}))


if __name__ == "__main__":
    main(*sys.argv[1:4])
