import { afterEach, describe, expect, it, vi } from 'vitest'
import { flushPromises, mount } from '@vue/test-utils'
import type { HostCheck, HostRecord } from '../../api/inventory'
import HostDialog from './HostDialog.vue'

function json(status: number, body: unknown): Response {
  return new Response(JSON.stringify(body), { status, headers: { 'Content-Type': 'application/json' } })
}

const LINE = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAO96p9YqcOpeBhjcKNxq5S2uCoYCY7Arr3JwhNk+4rD'

function checkAnswer(status: 'new' | 'trusted' | 'changed'): HostCheck {
  return {
    ok: true,
    detail: 'answered in 0.1 s',
    host_key: { line: LINE, fingerprint: 'SHA256:Igop/swZeiG7e/ghLr/lGZPyLy6KlnqJvGmBORTdma4', status },
    gpus: [{ index: 0, name: 'NVIDIA H100', uuid: 'GPU-a' }, { index: 1, name: 'NVIDIA H100', uuid: 'GPU-b' }],
  }
}

const added: HostRecord = {
  name: 'gpu-7', address: '10.0.0.7', port: 2222, user: 'warden', key_file: '', probe: 'ssh', labels: ['a100'], host_key: LINE, source: 'api',
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

async function filledDialog(record: HostRecord | null = null) {
  const wrapper = mount(HostDialog, { props: { record }, attachTo: document.body })
  if (!record) {
    const fields: [string, string][] = [['Name', 'gpu-7'], ['Address', '10.0.0.7'], ['SSH port', '2222'], ['SSH user', 'warden'], ['Labels', 'a100']]
    for (const [label, value] of fields) {
      const input = wrapper.findAll('label').find((l) => l.text().startsWith(label))!.find('input')
      await input.setValue(value)
    }
  }
  return wrapper
}

const button = (wrapper: Awaited<ReturnType<typeof filledDialog>>, text: string) => wrapper.findAll('button').find((b) => b.text() === text)

afterEach(() => {
  vi.unstubAllGlobals()
  document.body.innerHTML = ''
})

describe('adding a host', () => {
  it('checks the typed host, then adds it trusting the new key it showed', async () => {
    const sent = server({
      'POST /api/v1/inventory/hosts/check': () => json(200, checkAnswer('new')),
      'POST /api/v1/inventory/hosts': () => json(201, added),
    })
    const wrapper = await filledDialog()
    expect(button(wrapper, 'Trust this key and add')).toBeUndefined() // not before a check
    await button(wrapper, 'Check')!.trigger('click')
    await flushPromises()
    expect(sent[0]).toEqual({
      method: 'POST', path: '/api/v1/inventory/hosts/check',
      body: { name: 'gpu-7', address: '10.0.0.7', port: 2222, user: 'warden', key_file: '', labels: ['a100'] },
    })
    expect(wrapper.text()).toContain('SHA256:Igop/swZeiG7e/ghLr/lGZPyLy6KlnqJvGmBORTdma4')
    expect(wrapper.text()).toContain('2 × NVIDIA H100')
    await button(wrapper, 'Trust this key and add')!.trigger('click')
    await flushPromises()
    expect(sent[1]).toMatchObject({ method: 'POST', path: '/api/v1/inventory/hosts', body: { name: 'gpu-7', host_key: LINE } })
    expect(wrapper.emitted('saved')).toEqual([[added]])
  })

  it('adds a host whose key is trusted already without pinning one', async () => {
    const sent = server({
      'POST /api/v1/inventory/hosts/check': () => json(200, checkAnswer('trusted')),
      'POST /api/v1/inventory/hosts': () => json(201, added),
    })
    const wrapper = await filledDialog()
    await button(wrapper, 'Check')!.trigger('click')
    await flushPromises()
    await button(wrapper, 'Add')!.trigger('click')
    await flushPromises()
    expect(sent[1].body).toMatchObject({ host_key: null })
  })

  it('refuses a changed key, with the reason, and offers no way to add', async () => {
    server({ 'POST /api/v1/inventory/hosts/check': () => json(200, checkAnswer('changed')) })
    const wrapper = await filledDialog()
    await button(wrapper, 'Check')!.trigger('click')
    await flushPromises()
    expect(wrapper.find('[role="alert"]').text()).toMatch(/different key .* it is not added/)
    expect(wrapper.findAll('button').map((b) => b.text())).not.toContain('Add')
    expect(wrapper.findAll('button').filter((b) => /add/i.test(b.text()))).toHaveLength(0)
  })

  it('forgets the check when a field changes', async () => {
    server({ 'POST /api/v1/inventory/hosts/check': () => json(200, checkAnswer('new')) })
    const wrapper = await filledDialog()
    await button(wrapper, 'Check')!.trigger('click')
    await flushPromises()
    expect(button(wrapper, 'Trust this key and add')).toBeDefined()
    await wrapper.findAll('label').find((l) => l.text().startsWith('SSH port'))!.find('input').setValue('22')
    expect(button(wrapper, 'Trust this key and add')).toBeUndefined()
    expect(wrapper.find('[data-testid="host-check"]').exists()).toBe(false)
  })

  it('shows the reason of a refusal', async () => {
    server({
      'POST /api/v1/inventory/hosts/check': () => json(200, checkAnswer('new')),
      'POST /api/v1/inventory/hosts': () => json(409, { error: 'already_exists', message: 'a host named gpu-7 exists already', details: {} }),
    })
    const wrapper = await filledDialog()
    await button(wrapper, 'Check')!.trigger('click')
    await flushPromises()
    await button(wrapper, 'Trust this key and add')!.trigger('click')
    await flushPromises()
    expect(wrapper.find('[role="alert"]').text()).toBe('a host named gpu-7 exists already')
    expect(wrapper.emitted('saved')).toBeUndefined()
  })
})

describe('editing a host', () => {
  it('sends only the fields that changed', async () => {
    const sent = server({ 'PATCH /api/v1/inventory/hosts/gpu-7': () => json(200, { ...added, labels: ['a100', 'lab-2'] }) })
    const wrapper = await filledDialog(added)
    await wrapper.findAll('label').find((l) => l.text().startsWith('Labels'))!.find('input').setValue('a100, lab-2')
    await button(wrapper, 'Save')!.trigger('click')
    await flushPromises()
    expect(sent).toEqual([{ method: 'PATCH', path: '/api/v1/inventory/hosts/gpu-7', body: { labels: ['a100', 'lab-2'] } }])
    expect(wrapper.emitted('saved')).toHaveLength(1)
  })
})
