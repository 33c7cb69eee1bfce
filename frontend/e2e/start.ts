// Starts a whole Warden (tests/e2e/web_system.py: `warden run all` serving frontend/dist,
// against a simulated fleet over SSH) and stops it: for the global setup, and for a test that
// needs a system of its own (a newcomer's fresh one).
import { spawn, type ChildProcess } from 'node:child_process'
import { existsSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { createInterface } from 'node:readline'

/** A simulated host served over SSH but not in the config: to be added through the UI. */
export interface SpareHost {
  name: string
  address: string
  port: number
  user: string
  key_file: string
}

export interface System {
  url: string
  control: string
  data_dir: string
  hosts: string[]
  spare_hosts: SpareHost[]
  /** what `warden run all` printed */
  log: string
}

const repo = join(dirname(fileURLToPath(import.meta.url)), '..', '..')

export interface Running {
  system: System
  stop: () => Promise<void>
}

/** `python -m tests.e2e.web_system ARGS`, once its gateway answers. */
export async function startSystem(args: string[]): Promise<Running> {
  if (!existsSync(join(repo, 'frontend', 'dist', 'index.html'))) {
    throw new Error('no build in frontend/dist: run `make frontend` first')
  }
  const python = join(repo, '.venv', 'bin', 'python')
  const child: ChildProcess = spawn(python, ['-m', 'tests.e2e.web_system', ...args], {
    cwd: repo,
    stdio: ['pipe', 'pipe', 'inherit'],
  })
  const lines = createInterface({ input: child.stdout! })
  const system = await new Promise<System>((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`tests.e2e.web_system exited with ${code}`)))
    lines.once('line', (line) => resolve(JSON.parse(line) as System))
  })
  return { system, stop: () => stopChild(child) }
}

async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode === null) {
    const exited = new Promise((resolve) => child.once('exit', resolve))
    child.kill('SIGTERM')
    let timer: ReturnType<typeof setTimeout> | undefined
    await Promise.race([exited, new Promise((resolve) => (timer = setTimeout(resolve, 40_000)))])
    clearTimeout(timer)
    if (child.exitCode === null) child.kill('SIGKILL')
  }
  // Its pipes would keep this process alive.
  child.stdin?.destroy()
  child.stdout?.destroy()
}
