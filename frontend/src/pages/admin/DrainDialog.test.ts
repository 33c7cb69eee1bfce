import { afterEach, describe, expect, it, vi } from 'vitest'
import { flushPromises, mount } from '@vue/test-utils'
import DrainDialog from './DrainDialog.vue'

function json(status: number, body: unknown): Response {
  return new Response(JSON.stringify(body), { status, headers: { 'Content-Type': 'application/json' } })
}

/** fetch answering each "METHOD path" from `answers`, recording what was sent. */
function server(answers: Record<string, () => Response>) {
  const sent: { method: string; path: string; body: unknown }[] = []
  vi.stubGlobal('fetch', vi.fn(async (request: Request) => {
    const path = new URL(request.url, 'http://x').pathname
    const text = await request.text()
    sent.push({ method: request.method, path, body: text ? JSON.parse(text) : null })
    const answer = answers[`${request.method} ${path}`]
    return answer ? answer() : json(404, { error: 'not_found', message: 'no such route', details: {} })
  }))
  return sent
}

const WINDOW = {
  id: 4, host: 'dgx1', gpus: [0, 1], target: 'dgx1:0,1', start: '2026-12-02T08:00:00+00:00', end: null, reason: 'new fan',
  bookings: 'keep', stop_jobs: false, created_by: 'admin', created_at: '2026-12-01T08:00:00+00:00', ended_by: null, status: 'scheduled',
}

function field(wrapper: ReturnType<typeof mount>, label: string) {
  return wrapper.findAll('label').find((l) => l.text().startsWith(label))!
}

afterEach(() => {
  vi.unstubAllGlobals()
  document.body.innerHTML = ''
})

describe('draining a host', () => {
  it('sends the GPUs, the open end, the reason and the bookings choice, then says what became of the bookings', async () => {
    const affected = [
      { reservation_id: 7, owner: 'alice', title: 'sweep', start: '', end: '', outcome: 'kept', alternative: null, moved_to: null },
    ]
    const sent = server({ 'POST /api/v1/maintenance': () => json(201, { ...WINDOW, affected }) })
    const wrapper = mount(DrainDialog, { props: { host: 'dgx1' }, attachTo: document.body })
    await field(wrapper, 'GPUs').find('input').setValue('0-1')
    await field(wrapper, 'Reason').find('input').setValue(' new fan ')
    await field(wrapper, 'Bookings').find('select').setValue('move')
    await wrapper.find('form').trigger('submit')
    await flushPromises()
    expect(sent).toHaveLength(1)
    const body = sent[0]!.body as Record<string, unknown>
    expect(body).toMatchObject({ host: 'dgx1', gpus: [0, 1], end: null, reason: 'new fan', bookings: 'move', stop_jobs: false })
    expect(typeof body.start).toBe('string')
    expect(wrapper.find('[data-testid="drain-done"]').text()).toContain('1 booking overlaps it (1 kept); 1 owner was told.')
  })

  it('refuses a GPUs field it cannot read without asking the server, and shows a refusal', async () => {
    const sent = server({
      'POST /api/v1/maintenance': () => json(400, { error: 'invalid_request', message: 'dgx1 has no GPU dgx1:9', details: {} }),
    })
    const wrapper = mount(DrainDialog, { props: { host: 'dgx1' }, attachTo: document.body })
    await field(wrapper, 'Reason').find('input').setValue('fan')
    await field(wrapper, 'GPUs').find('input').setValue('zero')
    await wrapper.find('form').trigger('submit')
    await flushPromises()
    expect(sent).toHaveLength(0)
    expect(wrapper.text()).toContain('Not a GPU index')
    await field(wrapper, 'GPUs').find('input').setValue('9')
    await wrapper.find('form').trigger('submit')
    await flushPromises()
    expect(wrapper.text()).toContain('dgx1 has no GPU dgx1:9')
    expect(wrapper.find('[data-testid="drain-done"]').exists()).toBe(false)
  })
})
