// The hosts Warden monitors, as the admin manages them (`/api/v1/inventory/hosts`): list, add,
// edit, remove, and check a host before trusting its key, through the typed client (refusals
// are ApiErrors, shown by <ErrorNotice> with their reason). The answers' types are spelled out
// here: the generated HostCheck types `host_key` loosely (an empty object or null).
import { api, unwrap } from './client'

export type HostSource = 'config' | 'api' | 'local'
export type KeyStatus = 'trusted' | 'new' | 'changed'

/** A host in the inventory (services/shared/contracts/monitor.py HostRecord). */
export interface HostRecord {
  name: string
  address: string
  port: number
  user: string
  key_file: string
  probe: 'ssh' | 'nvml'
  labels: string[]
  /** the accepted public key line ("ssh-ed25519 AAAA..."); null: [ssh] known_hosts decides */
  host_key: string | null
  source: HostSource
}

/** The fields of a new host (the server fills in the rest). */
export interface NewHost {
  name: string
  address: string
  port?: number
  user: string
  key_file?: string
  probe?: 'ssh' | 'nvml'
  labels?: string[]
  host_key?: string | null
}

/** What connecting to a host found. */
export interface HostCheck {
  ok: boolean
  detail: string
  host_key: { line: string; fingerprint: string; status: KeyStatus } | null
  gpus: { index: number; name: string | null; uuid: string }[]
  /** whether the host's login writes the violation warning on terminals (group tty); null: not asked */
  terminals?: { ok: boolean; detail: string } | null
}

/** The path parameter of one host. */
const named = (name: string) => ({ params: { path: { name } } })

export const inventory = {
  list: () => (unwrap(api.GET('/api/v1/inventory/hosts')) as Promise<{ hosts: HostRecord[] }>).then((a) => a.hosts),
  add: (host: NewHost) =>
    unwrap(api.POST('/api/v1/inventory/hosts', { body: { port: 22, probe: 'ssh', ...host } })) as Promise<HostRecord>,
  update: (name: string, changes: Partial<Omit<HostRecord, 'name' | 'source'>>) =>
    unwrap(api.PATCH('/api/v1/inventory/hosts/{name}', { ...named(name), body: changes })) as Promise<HostRecord>,
  remove: (name: string) => unwrap(api.DELETE('/api/v1/inventory/hosts/{name}', named(name))) as Promise<HostRecord>,
  /** Check a host that is not in the inventory yet. */
  checkCandidate: (candidate: Partial<NewHost>) =>
    unwrap(api.POST('/api/v1/inventory/hosts/check', { body: candidate })) as Promise<HostCheck>,
  /** Check an inventory host, with `overrides` in place of its stored fields. */
  check: (name: string, overrides: Partial<NewHost> = {}) =>
    unwrap(api.POST('/api/v1/inventory/hosts/{name}/check', { ...named(name), body: overrides })) as Promise<HostCheck>,
}
