import { afterEach, describe, expect, it, vi } from 'vitest'
import { flushPromises, mount, RouterLinkStub } from '@vue/test-utils'
import { session } from '../../session'
import QueuePage from './QueuePage.vue'

function json(status: number, body: unknown): Response {
  return new Response(JSON.stringify(body), { status, headers: { 'Content-Type': 'application/json' } })
}

const QUEUE = {
  policy: 'fair', half_life_h: 168, horizon_h: 168, at: '2026-11-27T10:00:00Z',
  jobs: [
    {
      id: 9, owner: 'bob', name: 'debug', position: 1, gpus: 1, enqueued_at: '2026-11-27T09:50:00Z',
      max_runtime_s: 600, reason: 'no host has 1 free GPUs for 10 min', predicted_start: '2026-11-27T11:00:00Z',
    },
    {
      id: 4, owner: 'alice', name: 'sweep', position: 2, gpus: 8, enqueued_at: '2026-11-27T08:00:00Z',
      max_runtime_s: null, reason: 'no host has 8 GPUs; behind 1 jobs of users with less usage for their share', predicted_start: null,
    },
  ],
  users: [
    { user: 'bob', share: 0.5, usage_gpu_h: 0, queued: 1, running: 0 },
    { user: 'alice', share: 0.5, usage_gpu_h: 41.25, queued: 1, running: 2 },
  ],
}

afterEach(() => {
  vi.unstubAllGlobals()
  session.user = null
})

describe('the Queue page', () => {
  it('shows the jobs in order with reasons and predicted starts, and the users', async () => {
    session.user = { username: 'bob', roles: ['user'] } as typeof session.user
    session.accessToken = 'token'
    session.accessExpiresAt = Date.now() + 3_600_000
    const asked: string[] = []
    vi.stubGlobal('fetch', vi.fn(async (request: Request) => {
      const url = new URL(request.url, 'http://x')
      asked.push(url.pathname)
      return url.pathname === '/api/v1/queue' ? json(200, QUEUE) : json(404, { error: 'not_found', message: '', details: {} })
    }))
    const page = mount(QueuePage, { global: { stubs: { RouterLink: RouterLinkStub } } })
    await flushPromises()
    expect(asked).toContain('/api/v1/queue')
    const rows = page.findAll('[data-testid="queue-row"]')
    expect(rows.map((r) => r.text())).toHaveLength(2)
    expect(rows[0].text()).toContain('debug')
    expect(rows[0].classes()).toContain('mine')
    expect(rows[1].text()).toContain('behind 1 jobs of users with less usage')
    const starts = page.findAll('[data-testid="queue-start"]').map((c) => c.text())
    expect(starts[0]).not.toBe('not within horizon')
    expect(starts[1]).toBe('not within horizon')
    expect(page.find('[data-testid="queue-policy"]').text()).toContain('Fair share')
    const users = page.findAll('[data-testid="queue-user"]').map((r) => r.text())
    expect(users[1]).toContain('41.3')
    expect(users[0]).toContain('50 %')
  })
})
