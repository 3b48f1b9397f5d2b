/**
 * @module
 * The memory of the processes that run the Worker under `wrangler dev`: the
 * `workerd` children of wrangler, read from Linux's `/proc/<pid>/status`.
 */
import { readdirSync, readFileSync, writeFileSync } from "node:fs";

/**
 * `wrangler dev` runs two workerd processes: `worker` runs this Worker and
 * its Durable Objects; `proxy` is wrangler's entry proxy on the public port,
 * which every request and byte also crosses.
 */
export type WorkerdProcess = { pid: number; role: "worker" | "proxy" };

/** `anonBytes` is the heap-like part of RSS, where a buffered body would sit; the rest is mostly the mapped binary. */
export type MemoryReading = { rssBytes: number; peakRssBytes: number; anonBytes: number };

/** One process's memory over a measured stretch. */
export type MemoryReport = WorkerdProcess & {
  beforeRssBytes: number;
  beforeAnonBytes: number;
  /** The highest RSS during the stretch: kernel's VmHWM since it was reset, else the highest sample. */
  peakRssBytes: number;
  afterRssBytes: number;
  afterAnonBytes: number;
  /** How the peak was read: `VmHWM` when the kernel's high-water mark could be reset, else `sampled`. */
  peakSource: "VmHWM" | "sampled";
};

function parentOf(pid: number): number | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Fields after the command name, which is in parentheses and may hold spaces: state, ppid, ...
    return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
  } catch {
    return null;
  }
}

const commandOf = (pid: number): string => readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").join(" ");

/** The workerd processes below `rootPid`, at any depth. */
export function workerdProcesses(rootPid: number): WorkerdProcess[] {
  const pids = readdirSync("/proc")
    .filter((name) => /^\d+$/.test(name))
    .map(Number);
  const below = new Set([rootPid]);
  // Repeat until nothing changes, since /proc does not list parents before children.
  for (let grew = true; grew; ) {
    grew = false;
    for (const pid of pids) {
      const parent = parentOf(pid);
      if (parent !== null && below.has(parent) && !below.has(pid)) {
        below.add(pid);
        grew = true;
      }
    }
  }
  const found: WorkerdProcess[] = [];
  for (const pid of below) {
    if (pid === rootPid) continue;
    let comm: string;
    try {
      comm = readFileSync(`/proc/${pid}/comm`, "utf8").trim();
    } catch {
      continue;
    }
    // The runtime that runs user code is the one with an inspector; the entry proxy has none.
    if (comm === "workerd") found.push({ pid, role: commandOf(pid).includes("--inspector-addr") ? "worker" : "proxy" });
  }
  return found;
}

/** VmRSS, VmHWM (peak RSS) and RssAnon of `pid`, in bytes. */
export function readMemory(pid: number): MemoryReading {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const kib = (field: string): number => {
    const match = new RegExp(`^${field}:\\s+(\\d+) kB$`, "m").exec(status);
    if (!match) throw new Error(`/proc/${pid}/status: no ${field}`);
    return Number(match[1]) * 1024;
  };
  return { rssBytes: kib("VmRSS"), peakRssBytes: kib("VmHWM"), anonBytes: kib("RssAnon") };
}

/** Resets the kernel's peak-RSS mark of `pid` to its current RSS; false when not permitted. */
function resetPeak(pid: number): boolean {
  try {
    writeFileSync(`/proc/${pid}/clear_refs`, "5");
    return true;
  } catch {
    return false;
  }
}

/**
 * Measures `processes` while `work` runs: RSS before, the peak during (the
 * kernel's VmHWM after a reset, and RSS sampled every `sampleMs` as well),
 * and RSS after.
 */
export async function measureMemory<T>(
  processes: WorkerdProcess[],
  work: () => Promise<T>,
  sampleMs = 20,
): Promise<{ result: T; reports: MemoryReport[] }> {
  const state = processes.map((p) => {
    const before = readMemory(p.pid);
    return { ...p, before, hwmReset: resetPeak(p.pid), sampledPeak: before.rssBytes };
  });
  const sample = () => {
    for (const s of state) s.sampledPeak = Math.max(s.sampledPeak, readMemory(s.pid).rssBytes);
  };
  const timer = setInterval(sample, sampleMs);
  let result: T;
  try {
    result = await work();
  } finally {
    clearInterval(timer);
  }
  sample();
  const reports = state.map((s): MemoryReport => {
    const now = readMemory(s.pid);
    return {
      pid: s.pid,
      role: s.role,
      beforeRssBytes: s.before.rssBytes,
      beforeAnonBytes: s.before.anonBytes,
      peakRssBytes: s.hwmReset ? Math.max(now.peakRssBytes, s.sampledPeak) : s.sampledPeak,
      afterRssBytes: now.rssBytes,
      afterAnonBytes: now.anonBytes,
      peakSource: s.hwmReset ? "VmHWM" : "sampled",
    };
  });
  return { result, reports };
}

const mb = (bytes: number): string => `${(bytes / 2 ** 20).toFixed(1)} MiB`;

/** One line per process, for the test output. */
export const describeMemory = (label: string, reports: MemoryReport[]): string =>
  reports
    .map(
      (r) =>
        `${label}: workerd ${r.role} (pid ${r.pid}): RSS before ${mb(r.beforeRssBytes)}, peak ${mb(r.peakRssBytes)} ` +
        `(${r.peakSource}), after ${mb(r.afterRssBytes)}; peak growth ${mb(r.peakRssBytes - r.beforeRssBytes)}; ` +
        `anonymous RSS ${mb(r.beforeAnonBytes)} -> ${mb(r.afterAnonBytes)}`,
    )
    .join("\n");
