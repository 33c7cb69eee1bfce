import { afterEach, describe, expect, it, vi } from 'vitest'
import { flushPromises, mount, RouterLinkStub } from '@vue/test-utils'
import { session } from '../../session'
import JobsPage from './JobsPage.vue'

function json(status: number, body: unknown): Response {
  return new Response(JSON.stringify(body), { status, headers: { 'Content-Type': 'application/json' } })
}

const JOB = {
  id: 7, owner: 'bob', name: 'sweep', status: 'pending', queued: false, start_at: null, stop_at: null, reservation_id: null,
  max_runtime_s: null, template: null, waiting_reason: null, created_at: '2026-11-27T10:00:00Z', updated_at: '2026-11-27T10:00:00Z',
  tasks: [
    { index: 0, host: 'sim-001', gpus: ['GPU-a'], status: 'pending' },
    { index: 1, host: 'sim-002', gpus: ['GPU-b'], status: 'pending' },
  ],
}

/** fetch answering GET /api/v1/jobs with bob's job, recording each query asked. */
function jobsServer() {
  const queries: Record<string, string>[] = []
  vi.stubGlobal('fetch', vi.fn(async (request: Request) => {
    const url = new URL(request.url, 'http://x')
    if (url.pathname !== '/api/v1/jobs') return json(404, { error: 'not_found', message: '', details: {} })
    const query = Object.fromEntries(url.searchParams)
    queries.push(query)
    const items = query.owner && query.owner !== 'bob' ? [] : [JOB]
    return json(200, { items, total: items.length, limit: 50, offset: 0 })
  }))
  return queries
}

function signIn(username: string, roles: string[]) {
  session.user = { username, roles } as typeof session.user
  session.accessToken = 'token'
  session.refreshToken = 'refresh'
  session.accessExpiresAt = Date.now() + 3_600_000
}

afterEach(() => {
  vi.unstubAllGlobals()
  session.user = null
})

describe('the Jobs page', () => {
  it("shows an admin everyone's jobs, with a filter for their own", async () => {
    signIn('admin', ['admin', 'user'])
    const queries = jobsServer()
    const page = mount(JobsPage, { global: { stubs: { RouterLink: RouterLinkStub } } })
    await flushPromises()
    expect(queries[0].owner).toBeUndefined()
    expect(page.findAll('[data-testid="job-row"]')).toHaveLength(1)
    expect(page.text()).toContain('sweep')

    const whose = page.find('select')
    expect(whose.findAll('option').map((o) => o.text())).toEqual(['mine', 'everyone’s'])
    await whose.setValue('mine')
    await flushPromises()
    expect(queries.at(-1)!.owner).toBe('admin')
    expect(page.text()).toContain('No jobs of yours')
  })

  it('shows a user their own jobs first', async () => {
    signIn('bob', ['user'])
    const queries = jobsServer()
    mount(JobsPage, { global: { stubs: { RouterLink: RouterLinkStub } } })
    await flushPromises()
    expect(queries[0].owner).toBe('bob')
  })

  it('keeps each host name whole', async () => {
    signIn('bob', ['user'])
    jobsServer()
    const page = mount(JobsPage, { global: { stubs: { RouterLink: RouterLinkStub } } })
    await flushPromises()
    const hosts = page.find('[data-testid="job-hosts"]')
    expect(hosts.text()).toBe('sim-001, sim-002')
    // each name in a span that does not wrap ("sim-/001" at a narrow width)
    expect(hosts.findAll('.host').map((h) => h.text())).toEqual(['sim-001', 'sim-002'])
  })
})
