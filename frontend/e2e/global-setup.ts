// Starts a whole Warden for the browser tests: `warden run all` serving frontend/dist, against
// a simulated fleet over SSH (tests/e2e/web_system.py), and stops it afterwards.
import { spawn, type ChildProcess } from 'node:child_process'
import { existsSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { createInterface } from 'node:readline'
import type { TestProject } from 'vitest/node'

export interface System {
  url: string
  control: string
  data_dir: string
  hosts: string[]
}

declare module 'vitest' {
  export interface ProvidedContext {
    system: System
  }
}

const repo = join(dirname(fileURLToPath(import.meta.url)), '..', '..')
let child: ChildProcess | undefined

export async function setup(project: TestProject): Promise<void> {
  if (!existsSync(join(repo, 'frontend', 'dist', 'index.html'))) {
    throw new Error('no build in frontend/dist: run `make frontend` first')
  }
  const python = join(repo, '.venv', 'bin', 'python')
  child = spawn(python, ['-m', 'tests.e2e.web_system', '--hosts', '2', '--gpus', '4'], {
    cwd: repo,
    stdio: ['pipe', 'pipe', 'inherit'],
  })
  const lines = createInterface({ input: child.stdout! })
  const system = await new Promise<System>((resolve, reject) => {
    child!.once('exit', (code) => reject(new Error(`tests.e2e.web_system exited with ${code}`)))
    lines.once('line', (line) => resolve(JSON.parse(line) as System))
  })
  project.provide('system', system)
}

export async function teardown(): Promise<void> {
  if (!child) return
  if (child.exitCode === null) {
    const exited = new Promise((resolve) => child!.once('exit', resolve))
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
