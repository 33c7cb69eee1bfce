// A Warden of a test's own on its first run: a fresh temp directory, `warden init` and
// `warden run all` as `make run` runs them (stdin not a terminal, so no prompt), no
// administrator; resolves with the one-time set-up link the gateway prints. For browser tests
// that start where a newcomer starts (e2e/setup.e2e.ts).
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

const repo = join(dirname(fileURLToPath(import.meta.url)), '..', '..')
const python = join(repo, '.venv', 'bin', 'python')

/** The banner's line with the link (services/gateway/setup_link.py): group 1 the link, 2 the token. */
export const SETUP_LINK = /set-up link: (http:\/\/\S+\/setup\?token=([A-Za-z0-9_-]+))/

export interface FreshWarden {
  /** The one-time set-up link, e.g. http://127.0.0.1:PORT/setup?token=... */
  link: string
  token: string
  /** http://127.0.0.1:PORT */
  base: string
  /** Where its config (`warden.toml`) and data live. */
  dir: string
  config: string
  /** What `warden init` printed. */
  init: string
  /** Everything `warden run all` printed so far. */
  output: () => string
  /** SIGTERM, wait for the exit, remove the directory. */
  stop: () => Promise<void>
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const port = (server.address() as { port: number }).port
      server.close(() => resolve(port))
    })
  })
}

/** Starts it; `env` adds WARDEN_* settings (or anything else) to what it runs with. */
export async function startFreshWarden(env: Record<string, string> = {}): Promise<FreshWarden> {
  const dir = mkdtempSync(join(tmpdir(), 'warden-first-run-'))
  const port = await freePort()
  const environment: Record<string, string> = {}
  for (const [key, value] of Object.entries(process.env)) {
    if (!key.startsWith('WARDEN_') && value !== undefined) environment[key] = value
  }
  Object.assign(environment, {
    HOME: dir,
    XDG_CONFIG_HOME: join(dir, 'config'),
    XDG_DATA_HOME: join(dir, 'data'),
    PYTHONUNBUFFERED: '1',
    WARDEN_GATEWAY_PORT: String(port),
    WARDEN_MONITOR_LOCAL_NVML: 'off',
    ...env,
  })
  const config = join(dir, 'warden.toml')
  const command = (...args: string[]) => ['-m', 'services.cli', ...args, '--config', config]
  const init = spawnSync(python, command('init', '--data-dir', join(dir, 'state')), {
    cwd: repo,
    env: environment,
    stdio: ['ignore', 'pipe', 'pipe'],
    encoding: 'utf8',
  })
  if (init.status !== 0) throw new Error(`warden init failed: ${init.stdout}${init.stderr}`)
  const child: ChildProcess = spawn(python, command('run', 'all'), { cwd: repo, env: environment, stdio: ['ignore', 'pipe', 'pipe'] })
  let output = ''
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((resolve) => child.once('exit', resolve))
      child.kill('SIGTERM')
      await exited
    }
    rmSync(dir, { recursive: true, force: true })
  }
  try {
    const found = await new Promise<RegExpExecArray>((resolve, reject) => {
      const seen = (chunk: Buffer) => {
        output += chunk.toString()
        const match = SETUP_LINK.exec(output)
        if (match) resolve(match)
      }
      child.stdout!.on('data', seen)
      child.stderr!.on('data', seen)
      child.once('exit', (code) => reject(new Error(`warden run all exited with ${code}:\n${output}`)))
    })
    return { link: found[1], token: found[2], base: new URL(found[1]).origin, dir, config, init: init.stdout, output: () => output, stop }
  } catch (err) {
    await stop()
    throw err
  }
}
