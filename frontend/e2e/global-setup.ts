// Starts a whole Warden for the browser tests: `warden run all` serving frontend/dist, against
// a simulated fleet over SSH (tests/e2e/web_system.py) of 2 hosts x 4 GPUs and one spare host
// to add through the UI, and stops it afterwards.
import type { TestProject } from 'vitest/node'
import { startSystem, type Running, type System } from './start'

export type { System }

declare module 'vitest' {
  export interface ProvidedContext {
    system: System
  }
}

let running: Running | undefined

export async function setup(project: TestProject): Promise<void> {
  running = await startSystem(['--hosts', '2', '--gpus', '4', '--spare-hosts', '1'])
  project.provide('system', running.system)
}

export async function teardown(): Promise<void> {
  await running?.stop()
}
