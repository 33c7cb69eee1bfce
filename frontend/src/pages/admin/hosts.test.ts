import { describe, expect, it } from 'vitest'
import type { HostCheck, HostRecord } from '../../api/inventory'
import type { HostState } from './admin'
import { changes, editable, emptyForm, fingerprint, formOf, hostOf, mergeHosts, parseLabels, target, verdict } from './hosts'

function record(name: string, extra: Partial<HostRecord> = {}): HostRecord {
  return {
    name,
    address: '10.0.0.7',
    port: 22,
    user: 'warden',
    key_file: '',
    probe: 'ssh',
    labels: [],
    host_key: null,
    source: 'api',
    ...extra,
  }
}

function state(name: string, reachable: boolean | null): HostState {
  return {
    name,
    labels: [],
    reachable,
    down_since: null,
    down_reason: null,
    last_seen: null,
    sampled_at: null,
    cpu_percent: null,
    load_1m: null,
    load_5m: null,
    load_15m: null,
    memory_used_mib: null,
    memory_total_mib: null,
    gpu_status: null,
    gpu_error: null,
    gpus: [],
  }
}

describe('mergeHosts', () => {
  it('joins inventory and live state by name, keeping either side alone, in natural order', () => {
    const rows = mergeHosts([record('gpu-10'), record('gpu-2')], [state('gpu-2', true), state('old-1', false)])
    expect(rows.map((r) => r.name)).toEqual(['gpu-2', 'gpu-10', 'old-1'])
    expect(rows[0]).toMatchObject({ record: { name: 'gpu-2' }, state: { reachable: true } })
    expect(rows[1]).toMatchObject({ record: { name: 'gpu-10' }, state: null }) // added, not polled yet
    expect(rows[2]).toMatchObject({ record: null, state: { reachable: false } }) // live only
  })

  it('is empty for nothing', () => {
    expect(mergeHosts([], [])).toEqual([])
  })
})

describe('the form', () => {
  it('reads labels separated by commas or spaces, without repeats or empties', () => {
    expect(parseLabels(' a100, lab-2  ml,,a100 ')).toEqual(['a100', 'lab-2', 'ml'])
    expect(parseLabels('')).toEqual([])
  })

  it('turns the typed fields into a host, and back', () => {
    const typed = { ...emptyForm(), name: ' gpu-7 ', address: 'gpu-7.lab', port: ' 2222 ', user: 'warden', labels: 'a, b' }
    expect(hostOf(typed)).toEqual({ name: 'gpu-7', address: 'gpu-7.lab', port: 2222, user: 'warden', key_file: '', labels: ['a', 'b'] })
    const r = record('gpu-7', { labels: ['a', 'b'], port: 2222 })
    expect(hostOf(formOf(r))).toMatchObject({ name: 'gpu-7', port: 2222, labels: ['a', 'b'] })
  })

  it('sends a port it cannot read as typed, for the server to refuse with its reason', () => {
    expect(hostOf({ ...emptyForm(), port: 'twenty' }).port).toBe('twenty')
  })

  it('patches only what changed', () => {
    const r = record('gpu-7', { labels: ['a'] })
    expect(changes(r, hostOf(formOf(r)))).toEqual({})
    expect(changes(r, { ...hostOf(formOf(r)), port: 2200, labels: ['a', 'b'] })).toEqual({ port: 2200, labels: ['a', 'b'] })
  })

  it('shows where Warden logs in', () => {
    expect(target(record('x'))).toBe('warden@10.0.0.7:22')
    expect(target(record('x', { address: '::1', port: 2200 }))).toBe('warden@[::1]:2200')
  })

  it('does not edit this machine or a host it only sees live', () => {
    expect(editable(record('x', { source: 'local' }))).toBe(false)
    expect(editable(null)).toBe(false)
    expect(editable(record('x', { source: 'config' }))).toBe(true)
  })
})

describe('verdict of a check', () => {
  const check = (status: 'trusted' | 'new' | 'changed' | null, ok = true): HostCheck => ({
    ok,
    detail: ok ? 'answered' : 'refused',
    host_key: status ? { line: 'ssh-ed25519 AAAA', fingerprint: 'SHA256:abc', status } : null,
    gpus: [],
  })

  it('offers to trust a new key, sending its line', () => {
    expect(verdict(check('new'))).toMatchObject({ action: 'Trust this key and add', trust: 'ssh-ed25519 AAAA' })
  })

  it('adds with a trusted key without sending one', () => {
    expect(verdict(check('trusted'))).toMatchObject({ action: 'Add', trust: null, tone: 'ok' })
  })

  it('refuses a changed key, saying why', () => {
    const v = verdict(check('changed'))
    expect(v.action).toBeNull()
    expect(v.trust).toBeNull()
    expect(v.message).toMatch(/different key \(SHA256:abc\)/)
  })

  it('lets a host that did not answer be added, trusting nothing', () => {
    expect(verdict(check(null, false))).toMatchObject({ action: 'Add anyway', trust: null, tone: 'warn' })
  })
})

describe('fingerprint', () => {
  it('is what ssh-keygen -l prints', async () => {
    // ssh-keygen -lf of this key prints SHA256:Igop/swZeiG7e/ghLr/lGZPyLy6KlnqJvGmBORTdma4
    const line = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAO96p9YqcOpeBhjcKNxq5S2uCoYCY7Arr3JwhNk+4rD host'
    expect(await fingerprint(line)).toBe('SHA256:Igop/swZeiG7e/ghLr/lGZPyLy6KlnqJvGmBORTdma4')
  })

  it('is null for a line that is not a key', async () => {
    expect(await fingerprint('garbage')).toBeNull()
    expect(await fingerprint('ssh-ed25519 !!!')).toBeNull()
  })
})
