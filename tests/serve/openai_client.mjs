// openai_client.mjs BASE_URL API_KEY - the official OpenAI Node client against
// `lizard serve`: models, a completion, a chat answer, both streamed (the
// stream's text must equal the whole answer's, greedy), usage, a 400.
import OpenAI from 'openai';

const [base, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey, maxRetries: 0, timeout: 60000 });
let failures = 0;
const check = (cond, what) => {
  if (!cond) { failures++; console.error(`FAIL: ${what}`); }
};

const models = await client.models.list();
const model = models.data[0].id;
check(typeof model === 'string' && model.length > 0, 'models.list gives a model id');

const greedy = { model, max_tokens: 8, temperature: 0, ignore_eos: true };
const c = await client.completions.create({ ...greedy, prompt: 'The lizard basks' });
check(typeof c.choices[0].text === 'string', 'completion text');
check(c.usage.completion_tokens === 8, `completion usage ${JSON.stringify(c.usage)}`);

let streamed = '', chunks = 0, finish = null;
const cs = await client.completions.create({ ...greedy, prompt: 'The lizard basks', stream: true });
for await (const chunk of cs) {
  chunks++;
  streamed += chunk.choices[0]?.text ?? '';
  finish = chunk.choices[0]?.finish_reason ?? finish;
}
check(chunks >= 2 && streamed === c.choices[0].text, `streamed completion '${streamed}' vs '${c.choices[0].text}'`);
check(finish === 'length', `completion finish_reason ${finish}`);

const messages = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Hello there' }];
const chat = await client.chat.completions.create({ ...greedy, messages });
check(chat.choices[0].message.role === 'assistant', 'chat role');
check(typeof chat.choices[0].message.content === 'string', 'chat content');
check(chat.usage.completion_tokens === 8 && chat.usage.prompt_tokens > 0, `chat usage ${JSON.stringify(chat.usage)}`);

let chatStreamed = '', usage = null;
const ss = await client.chat.completions.create({ ...greedy, messages, stream: true,
                                                   stream_options: { include_usage: true } });
for await (const chunk of ss) {
  chatStreamed += chunk.choices[0]?.delta?.content ?? '';
  usage = chunk.usage ?? usage;
}
check(chatStreamed === chat.choices[0].message.content,
      `streamed chat '${chatStreamed}' vs '${chat.choices[0].message.content}'`);
check(usage && usage.completion_tokens === 8, `streamed chat usage ${JSON.stringify(usage)}`);

try {
  await client.completions.create({ model, prompt: 'x', max_tokens: -3 });
  check(false, 'max_tokens -3 accepted');
} catch (e) {
  check(e.status === 400 && e.error?.param === 'max_tokens', `max_tokens -3: ${e.status} ${JSON.stringify(e.error)}`);
}

console.log(failures ? `openai client: ${failures} failures` : 'openai client: all checks passed');
process.exit(failures ? 1 : 0);
