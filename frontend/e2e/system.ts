// The tests' own side door into the running system: its REST API (signed in as someone) and
// the simulator's control API (foreign processes, hosts going down).
import { PASSWORD } from './browser.mjs'

export async function tokenOf(base: string, username: string): Promise<string> {
  const answer = await fetch(`${base}/api/v1/session`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ username, password: PASSWORD }),
  })
  if (!answer.ok) throw new Error(`cannot sign in as ${username}: ${answer.status}`)
  return ((await answer.json()) as { access_token: string }).access_token
}

export async function apiCall<T>(base: string, token: string, method: string, path: string, body?: unknown): Promise<T> {
  const answer = await fetch(`${base}/api/v1${path}`, {
    method,
    headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  const text = await answer.text()
  if (!answer.ok) throw new Error(`${method} ${path}: ${answer.status} ${text}`)
  return (text ? JSON.parse(text) : null) as T
}

export interface Gpu {
  uuid: string
  host: string
  index: number
}

/** Every GPU, once the monitor has seen all `count` of them. */
export async function gpus(base: string, token: string, count: number): Promise<Gpu[]> {
  for (let i = 0; i < 120; i++) {
    const { gpus } = await apiCall<{ gpus: Gpu[] }>(base, token, 'GET', '/gpus')
    if (gpus.length >= count) return gpus
    await new Promise((r) => setTimeout(r, 500))
  }
  throw new Error(`fewer than ${count} GPUs after 60 s`)
}

export async function control<T>(controlUrl: string, method: string, path: string, body?: unknown): Promise<T> {
  const answer = await fetch(`${controlUrl}${path}`, {
    method,
    headers: { 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  if (!answer.ok) throw new Error(`simulator ${method} ${path}: ${answer.status} ${await answer.text()}`)
  return (await answer.json()) as T
}

/** YYYY-MM-DD of a Date in this (the browser's) time zone. */
export function localDay(date: Date): string {
  const pad = (n: number) => String(n).padStart(2, '0')
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}`
}
